"""When each claim's margin was written, from the card's git history (pre-registration, per claim).

A claim is pre-registered when the first commit whose card holds the claim with its current margin
predates the earliest start of the claim's runs (`paper.claims.first_start`). Older versions of a card
are read as plain YAML (today's schema may refuse them); outside a git checkout every claim's time is
unknown (the card-level `margins_preregistered` flag then stands).
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import yaml

from paper.cards import CardError, parse_card, split_front_matter


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.cache
def margin_commits(card_path: Path) -> dict[str, float]:
    """claim id -> author time (POSIX; committer times change when history is replayed) of the first
    commit whose version of the card holds that claim with the margin the card holds now; claims never
    committed (a new, uncommitted card) are left out."""
    card_path = card_path.resolve()
    root_out = _git(card_path.parent, "rev-parse", "--show-toplevel")
    if root_out is None:
        return {}
    root = Path(root_out.strip())
    rel = card_path.relative_to(root).as_posix()
    current = {c.id: c.margin for c in parse_card(card_path.read_text()).claims}
    log = _git(root, "log", "--reverse", "--format=%H %at", "--follow", "--", rel) or ""
    found: dict[str, float] = {}
    for line in log.splitlines():
        sha, when = line.split()
        for path in (rel, *_old_names(root, sha, rel)):
            text = _git(root, "show", f"{sha}:{path}")
            if text is not None:
                break
        else:
            continue
        for claim_id, margin in _claim_margins(text).items():
            if claim_id in current and claim_id not in found and margin == current[claim_id]:
                found[claim_id] = float(when)
    return found


def _claim_margins(text: str) -> dict[str, float]:
    """claim id -> margin in one version of a card, read from its front matter as plain YAML (an old card
    that no longer passes today's schema still says which margins it held)."""
    try:
        front, _ = split_front_matter(text)
        data = yaml.safe_load(front) or {}
    except (CardError, yaml.YAMLError):
        return {}
    out = {}
    for claim in data.get("claims") or [] if isinstance(data, dict) else []:
        if isinstance(claim, dict) and "id" in claim and isinstance(claim.get("margin"), int | float):
            out[str(claim["id"])] = float(claim["margin"])
    return out


def _old_names(root: Path, sha: str, rel: str) -> list[str]:
    """The card's path in commit `sha` if it was renamed since (`git log --follow`)."""
    out = _git(root, "show", "--name-only", "--format=", sha) or ""
    name = Path(rel).name
    return [p for p in out.splitlines() if p.endswith("/" + name) and p != rel]
