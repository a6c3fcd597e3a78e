"""`python -m helix_dbos.cli`."""

from helix_dbos.cli.main import main

raise SystemExit(main())
