"""Where evaluations run: the forkserver worker pool, its job types, the OS sandbox, arrays as files."""
