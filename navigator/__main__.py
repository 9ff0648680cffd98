from navigator.cli.main import main

raise SystemExit(main())
