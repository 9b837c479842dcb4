"""sched: RLScheduler (SC20) — batch scheduling with RL, its simulator and heuristics."""
