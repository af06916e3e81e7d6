"""The one registry of methods: name -> Method subclass. A new method is one folder and one line here."""

from common.method import Method
from replications.canopy.method import Canopy
from replications.ccpo.method import CCPO
from replications.grpo.method import GRPO
from replications.sharp.method import SHARP

METHODS: dict[str, type[Method]] = {
    "grpo": GRPO,
    "canopy": Canopy,
    "ccpo": CCPO,
    "sharp": SHARP,
}
