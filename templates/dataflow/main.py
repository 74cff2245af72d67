"""The Flex Template launcher's Python file (`FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py` in the Dockerfile).

The launcher runs `python /template/main.py --config=... [--output=...] [Beam options]`; everything
happens in `beam_pipelines.flex_template.main`, which submits the job and returns without waiting.
A file outside the package, so the package's own modules never shadow top-level imports.
"""

import sys

from beam_pipelines.flex_template import main

if __name__ == "__main__":
    sys.exit(main())
