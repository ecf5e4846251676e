from gatewayd.cli import main

main()
