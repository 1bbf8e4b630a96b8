"""Running regions in worker processes: the scheduler, the worker, their wire format."""
