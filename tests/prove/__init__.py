"""browserworker/prove: chaos over every fault point, fault points, effects without proof."""
