"""``python -m kdraexp [OPTIONS]``: the ``kdraexp`` command."""

from kdraexp.app.cli import main

if __name__ == "__main__":
    main()
