from roseprof.cli import main

main()
