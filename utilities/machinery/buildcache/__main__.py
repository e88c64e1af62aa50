"""``python -m utilities.machinery.buildcache [clear]``: the cache's folder and size, or clear it."""

from . import main

raise SystemExit(main())
