"""``python -m rlinf_core`` runs the ``rlinf`` CLI."""

from rlinf_core.cli import main

if __name__ == "__main__":
    main()
