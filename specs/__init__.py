"""JSON graphs shipped with graphc: one or more per seed op, fused examples, the demo set."""
