from memdoc.cli import main

main()
