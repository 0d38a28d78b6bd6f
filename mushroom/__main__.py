from mushroom.cli import main

main()
