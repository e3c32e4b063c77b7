from kdbert.cli.commands import main

raise SystemExit(main())
