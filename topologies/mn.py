"""Every fabricemu topology for stock Mininet, from one file:

    mn --custom topologies/mn.py --topo fattree,4 --switch lxbr,stp=1 --controller none

``mn --custom`` exec()s this file with /usr/bin/python3: no ``__file__``, the checkout
not on ``sys.path``, no venv. So it puts its own checkout's root on ``sys.path`` (found
from the code object's file name) and hands Mininet the registry of topology files,
which use only the standard library and Mininet.
"""

import os
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sys._getframe().f_code.co_filename)))
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from topologies.spec import registry  # noqa: E402

topos = registry()
