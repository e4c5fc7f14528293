"""Worker processes at work together: fleets draining a store, simulated hosts, PostgreSQL outages, the soak."""
