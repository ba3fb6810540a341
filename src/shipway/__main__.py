from shipway.cli import main

main()
