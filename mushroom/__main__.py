from mushroom.cli.app import main

main()
