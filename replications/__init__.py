"""The one registry of methods: name -> Method subclass. A new method is one folder and one line here."""

from common.method import Method
from replications.canopy.method import Canopy
from replications.ccpo.method import CCPO
from replications.grpo.method import GRPO
from replications.iapo.method import IAPO
from replications.inflowop.method import InFlowOp
from replications.river.method import River
from replications.sharp.method import SHARP
from replications.skillrise.method import SkillRise

METHODS: dict[str, type[Method]] = {
    "grpo": GRPO,
    "canopy": Canopy,
    "ccpo": CCPO,
    "sharp": SHARP,
    "iapo": IAPO,
    "river": River,
    "skillrise": SkillRise,
    "inflowop": InFlowOp,
}
