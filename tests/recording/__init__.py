"""browserworker/recording and the pytest plugin: recording runs, replaying them offline."""
