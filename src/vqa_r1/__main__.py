from vqa_r1.cli import main

raise SystemExit(main())
