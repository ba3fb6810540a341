from shipway.cli.main import main

main()
