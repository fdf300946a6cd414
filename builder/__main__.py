from builder.cli.main import main

raise SystemExit(main())
