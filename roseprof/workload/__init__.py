"""What roseprof knows about roseinfer (region names, the default command, the step log); the rest of
roseprof works on any program."""
