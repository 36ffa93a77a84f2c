from webhook.cli.main import main

raise SystemExit(main())
