"""`python -m mushroom` and the `mushroom` command.

The command line's modules take a moment to import; a Ctrl-C then came before the CLI's
error boundary and printed a traceback. Here it is one line and exit 130, as later.
"""

import sys


def main() -> None:
    """Imports the command line and runs it."""
    try:
        from mushroom.cli.app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted while starting: nothing was done\n")
        raise SystemExit(130) from None
    run()


if __name__ == "__main__":
    main()
