"""The textworld environment's families (SkillRise's chains, `env.families=true`): a family's games share
the recipe and nothing else, TextWorld's engine judges the placements, a right abstract document from
game 0 wins games 1 and 2 where a concrete one names things that are not there, and the curate turn's
parsing, length limit and invalid-action penalty."""

from __future__ import annotations

import json
import random

import pytest

from envs.benchmarks.textworld.env import TextWorldEnv
from envs.benchmarks.textworld.families import FILLER, doc_kind, doc_right, guided_pairs, parse_skill
from envs.benchmarks.textworld.family_games import COLOURS
from envs.benchmarks.textworld.games import TextWorldConfig, _textworld

try:
    _textworld()
except ImportError:
    pytest.skip("textworld is not installed (make setup installs it --no-deps)", allow_module_level=True)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> TextWorldEnv:
    return TextWorldEnv(TextWorldConfig(families=True, train_size=9, heldout_size=6, dev_size=3,
                                        demo_slip=0.0, invalid_penalty=0.25, demo_abstract=1.0,
                                        demo_concrete=0.0, cache_dir=str(tmp_path_factory.mktemp("twf"))))


def tasks(env: TextWorldEnv, split: str = "train") -> list[dict]:
    return [json.loads(t) for t in env.task_set()[split]["task"]]


def play(env, task, choose, variant="main"):
    """Plays to the end; returns the last StepResult, the events and the first observation."""
    ep = env.new_episode(task, random.Random(0), variant)
    obs = first = ep.start()
    events, r = [], None
    while obs is not None:
        r = ep.step(choose(ep, obs))
        events += r.events
        obs = r.next
    return r, events, first


def follow(doc: str):
    """A solver that reads only its prompt: the document's colour pairs, mapped to this game's names."""
    colours = [w for w in doc.split() if w not in FILLER]
    pairs = list(zip(colours[::2], colours[1::2], strict=True))

    def choose(ep, obs):
        listed = obs.text.split("Commands: ")[1].split("\n")[0].split(", ")
        for thing_colour, place_colour in pairs:
            if any(c.startswith(f"take {thing_colour} ") and f" from {place_colour} " in c for c in listed):
                continue  # already on its place
            put = next((c for c in listed
                        if c.startswith(f"put {thing_colour} ") and f" on {place_colour} " in c), None)
            take = next((c for c in listed if c.startswith(f"take {thing_colour} ")), None)
            if put or take:
                return put or take
        return "look"
    return choose


def test_a_family_shares_its_recipe_and_nothing_else(env):
    train = tasks(env)
    assert [t["plan"] for t in train] == [1, 2, 3] * 3 and env.task_set()["train"]["tier"] == [1, 2, 3] * 3
    families = [train[i:i + 3] for i in range(0, 9, 3)]
    recipes = set()
    for fam in families:
        assert len({t["family"] for t in fam}) == 1 and all(t["recipe"] == fam[0]["recipe"] for t in fam)
        recipe = fam[0]["recipe"]
        recipes.add(json.dumps(recipe))
        colours = [c for pair in recipe for c in pair]
        assert len(set(colours)) == len(colours) and set(colours) <= set(COLOURS)
        for t in fam:
            names = {n for _, n in t["things"] + t["places"]}
            assert len(t["things"]) == len(t["places"]) == t["plan"] + 1  # one distractor each
            # the plan's colours are there; the distractors' colours are in no step of the recipe
            distractors = {c for c, _ in t["things"]} - {a for a, _ in recipe[:t["plan"]]}
            assert distractors <= set(COLOURS) - set(colours)
            assert len(names) == len(t["things"]) + len(t["places"])
        # the same abstract order under different names: games of a family rarely share a noun
        nouns = [{n for _, n in t["things"]} for t in fam]
        assert nouns[0] != nouns[1] != nouns[2]
    heldout = tasks(env, "heldout") + tasks(env, "dev")
    # no recipe in two splits (nor two families)
    assert not recipes & {json.dumps(t["recipe"]) for t in heldout}
    assert len(recipes | {json.dumps(t["recipe"]) for t in heldout}) == 6


def test_roles_variants_and_the_default_mode_is_unchanged(env):
    assert env.roles == ("solver", "curator") and env.variants() == ("main", "curate")
    plain = TextWorldEnv(TextWorldConfig(train_size=3, heldout_size=3, dev_size=3,
                                         cache_dir=env.cfg.cache_dir))
    assert plain.roles == ("player",) and plain.variants() == ("main",) and TextWorldEnv.roles == ("player",)
    assert set(json.loads(plain.task_set()["train"]["task"][0])) == {"quest_length", "seed"}
    with pytest.raises(ValueError, match="variant"):
        plain.new_episode(json.loads(plain.task_set()["train"]["task"][0]), random.Random(0), "curate")


def test_the_engine_judges_placements_and_the_oracle_wins(env):
    for t in tasks(env):
        r, events, first = play(env, t, lambda ep, obs: ep.oracle_action())
        assert r.success and r.reward == 1.0 and not events and r.info["steps"] == 2 * t["plan"], t
        colour = {f"{c} {n}": c for c, n in t["things"] + t["places"]}
        placed = [(colour[c.split(" on ")[0][4:]], colour[c.split(" on ")[1]]) for c in r.info["found"]]
        assert placed == [tuple(p) for p in t["recipe"][:t["plan"]]]
        assert first.text.startswith("Skill: none\nObjective: ") and f"Score: 0 of {t['plan']}." in first.text


def test_a_wrong_placement_scores_nothing_and_the_limit_ends_the_game(env):
    t = tasks(env)[1]  # plan 2: at most 2 * 2 + 2 = 6 commands
    names = {c: f"{c} {n}" for c, n in t["things"] + t["places"]}
    thing, right = names[t["recipe"][0][0]], names[t["recipe"][0][1]]
    wrong = next(f"{c} {n}" for c, n in t["places"] if f"{c} {n}" != right)
    ep = env.new_episode(t, random.Random(0))
    ep.start()
    assert "Score: 0 of 2." in ep.step(f"take {thing}").next.text
    assert "Score: 0 of 2." in ep.step(f"put {thing} on {wrong}").next.text
    r = ep.step("dance")
    assert [e.kind for e in r.events] == ["invalid_action"]
    assert r.next.text.startswith("Invalid command. Score: 0 of 2.")
    ep.step(f"take {thing} from {wrong}")
    assert "Score: 1 of 2." in ep.step(f"put {thing} on {right}").next.text
    r = ep.step("look")
    assert r.next is None and not r.success and r.info["steps"] == 6
    assert r.info["found"] == [f"put {thing} on {right}"]
    assert r.reward == pytest.approx(-0.25)  # one invalid command, env.invalid_penalty = 0.25


def test_an_abstract_document_from_game_0_wins_games_1_and_2_a_concrete_one_does_not(env):
    """The mechanism can show: the curate turn's abstract document (colours) transfers to the chain's
    later games, whose nouns are fresh; the concrete one (nouns) names things that are not there."""
    for fam in (tasks(env)[0:3], tasks(env)[3:6]):
        r, _, _ = play(env, fam[0], lambda ep, obs: ep.oracle_action())
        curate = {**fam[0], "skill": "", "found": r.info["found"]}
        ep = env.new_episode(curate, random.Random(0), "curate")
        assert "Right placements in the last game: put " in ep.start().text
        done = ep.step(ep.expert_action())
        assert done.info["doc_abstract"] and done.info["doc_right"] and done.success
        abstract = done.info["skill"]
        for game in fam[1:]:
            first_game = {**game, "skill": abstract}
            won, _, prompt = play(env, first_game, follow(abstract))
            assert prompt.text.startswith(f"Skill: {abstract}\n")
            assert won.info["score"] >= 1  # the documented first placement is made in every later game
        thing, place = r.info["found"][0][4:].split(" on ")
        concrete = f"{thing.split()[1]} on {place.split()[1]}"
        assert doc_kind(concrete.split()) == "concrete"
        for game in fam[1:]:
            lost, _, _ = play(env, {**game, "skill": concrete}, follow(concrete))
            assert lost.info["score"] == 0  # no colour in the document: nothing to look up


def test_a_right_document_wins_every_game_of_the_chain(env):
    fam = tasks(env)[6:9]
    recipe = fam[0]["recipe"]
    doc = " ".join(f"{t} on {p}" for t, p in recipe)
    for game in fam:
        won, events, _ = play(env, {**game, "skill": doc}, follow(doc))
        assert won.success and won.reward == 1.0 and not events


@pytest.mark.parametrize("action, words", [
    (" <skill> red on blue, then green on yellow </skill>",
     ["red", "on", "blue", "then", "green", "on", "yellow"]),
    ("<skill>Red On Blue.</skill> trailing", ["red", "on", "blue"]),
    ("<skill></skill>", []),
    ("<skill>" + " w" * 12 + "</skill>", ["w"] * 12),
])
def test_curate_parses_the_skill_between_tags(action, words):
    assert parse_skill(action, 12) == words


@pytest.mark.parametrize("action", ["red on blue", "<skill> red on blue", "<skill>" + " w" * 13 + "</skill>",
                                    "<skill> red\u00a0blue </skill>", "<skill> rouge→bleu </skill>",
                                    "<skill> " + "x" * 13 + " </skill>", "</skill><skill>"])
def test_curate_rejects_what_it_cannot_read(action):
    assert parse_skill(action, 12) is None


def test_document_kinds():
    recipe = [["red", "blue"], ["green", "yellow"], ["white", "black"]]
    assert doc_kind([]) == doc_kind(["put", "the", "on"]) == "empty"
    assert doc_kind(["red", "on", "blue"]) == "abstract" and doc_right(["red", "on", "blue"], recipe)
    assert doc_right(["put", "red", "on", "blue", "then", "green", "on", "yellow"], recipe)
    assert not doc_right(["green", "on", "yellow"], recipe) and not doc_right(["red"], recipe)
    assert not doc_right(["red", "on", "green"], recipe)
    assert doc_kind(["mug", "on", "stand"]) == "concrete" and not doc_right(["mug", "on", "stand"], recipe)
    assert doc_kind(["red", "mug", "on", "blue", "stand"]) == "other"


def test_an_invalid_curate_is_an_invalid_action_with_the_penalty(env):
    t = {**tasks(env)[0], "skill": "red on blue", "found": ["put no such thing", 7, "x" * 10_000]}
    ep = env.new_episode(t, random.Random(0), "curate")
    obs = ep.start()
    assert obs.role == "curator" and "Right placements in the last game: none." in obs.text
    r = ep.step("red on blue")  # no tags
    assert r.next is None and [e.kind for e in r.events] == ["invalid_action"]
    assert "<skill>" in r.events[0].data["why"]
    assert r.reward == pytest.approx(-0.25) and not r.success
    assert r.info["skill"] == "" and r.info["doc_empty"]
    ok = env.new_episode(t, random.Random(0), "curate").step("<skill>" + " red" * 13 + "</skill>")  # too long
    assert ok.events and ok.reward == pytest.approx(-0.25)


@pytest.mark.parametrize("setting, match", [
    ({"train_size": 10}, "multiple of 3"),
    ({"quest_lengths": [1, 1, 2]}, "distinct"),
    ({"quest_lengths": [1, 6]}, "colours"),
    ({"family_distractors": -1}, "colours"),
    ({"max_skill_words": 0}, "max_skill_words"),
])
def test_family_settings_that_cannot_work_are_refused(setting, match, tmp_path):
    base = {"families": True, "train_size": 9, "heldout_size": 3, "dev_size": 3, "cache_dir": str(tmp_path)}
    with pytest.raises(ValueError, match=match):
        TextWorldEnv(TextWorldConfig(**{**base, **setting}))


def test_a_reply_that_names_a_listed_command_plays_the_first_one_named(env):
    """SmolLM2-135M wraps its commands in prose; the first listed command a reply names is played."""
    t = tasks(env)[2]
    a, b = sorted(f"{c} {n}" for c, n in t["things"])[:2]
    ep = env.new_episode(t, random.Random(0))
    ep.start()
    assert ep.command_in(f"  TAKE  {a.upper()}  ") == f"take {a}"
    assert ep.command_in(f"Sure! I will Take {b}, then take {a}.") == f"take {b}"
    assert ep.command_in(f"take {a[:-1]}") is None and ep.command_in("take it") is None
    assert ep.command_in("x" * 300 + f" take {a}") is None  # past the first 300 characters
    r = ep.step(f"1. Take {a}\n2. Take {b}")
    assert not r.events and f"You carry: {a}." in r.next.text


def test_guided_pairs_by_hand():
    things, places = ["red mug", "blue lamp"], ["green stand", "white desk"]
    assert guided_pairs("red on green, then blue on white", things, places) == [("red mug", "green stand"),
                                                                              ("blue lamp", "white desk")]
    assert guided_pairs("mug on desk", things, places) == [("red mug", "white desk")]  # nouns that are here
    assert guided_pairs("cup on shelf then blue on white", things, places) == [("blue lamp", "white desk")]
    # an odd word is dropped
    assert guided_pairs("red green blue", things, places) == [("red mug", "green stand")]
    assert guided_pairs("", things, places) == []


def test_the_demonstrator_reads_only_the_prompt(env):
    """The SFT demonstrator follows a right document to a win in 2 L commands without the hidden recipe,
    searches by elimination without one (never the same wrong placement twice, never an invalid command),
    and wins some games that way but not all."""
    wins = []
    for t in tasks(env):
        doc = " ".join(f"{a} on {b}" for a, b in t["recipe"][:t["plan"]])
        ep = env.new_episode({**t, "skill": doc}, random.Random(0))
        ep.steps_right = []  # the oracle's hidden recipe is gone: the document alone must carry the game
        obs, r = ep.start(), None
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        assert r.success and r.info["steps"] == 2 * t["plan"] and r.info["invalid_calls"] == 0
        for seed in range(4):
            ep = env.new_episode(t, random.Random(seed))
            ep.steps_right = []
            obs, puts = ep.start(), []
            while obs is not None:
                action = ep.expert_action()
                r = ep.step(action)
                assert not r.events, action
                if action.startswith("put ") and action[4:] not in {f[4:] for f in ep.found}:
                    puts.append(action)
                obs = r.next
            assert len(puts) == len(set(puts))  # a placement that raised nothing is not tried again
            wins.append(r.success)
    assert 0 < sum(wins) < len(wins)


def test_the_demo_split_is_scripted_chains_and_leaves_the_other_splits_alone(tmp_path):
    base = dict(families=True, train_size=6, heldout_size=3, dev_size=3, cache_dir=str(tmp_path))
    plain = TextWorldEnv(TextWorldConfig(**base))
    env = TextWorldEnv(TextWorldConfig(**base, demo_size=30, demo_abstract=0.5, demo_concrete=0.25))
    for split in ("train", "heldout", "dev"):
        assert env.task_set()[split]["task"] == plain.task_set()[split]["task"]
    rows = [json.loads(t) for t in env.task_set()["demo"]["task"]]
    assert len(rows) == 10 * 5 and env.task_set()["demo"]["tier"] == [1, 1, 2, 2, 3] * 10
    kinds = []
    for c in range(10):
        chain = rows[5 * c: 5 * c + 5]
        assert [r.get("kind", "solve") for r in chain] == ["solve", "curate", "solve", "curate", "solve"]
        assert len({r["family"] for r in chain}) == 1 and chain[0]["skill"] == "" and chain[1]["skill"] == ""
        # each curate row holds the placements found in the game before it, with its document
        for p in (1, 3):
            cur = chain[p]
            assert cur["plan"] == chain[p - 1]["plan"] and cur["skill"] == chain[p - 1]["skill"]
            assert all(f.startswith("put ") for f in cur["found"]) and len(cur["found"]) <= cur["plan"]
            curate = type(env.new_episode(cur, random.Random(0), "curate"))
            assert isinstance(env.new_episode(cur, random.Random(0)), curate)
            kinds.append(doc_kind(chain[p + 1]["skill"].split()))  # what the scripted curator wrote
    assert set(kinds) <= {"abstract", "concrete", "empty"} and {"abstract", "empty"} <= set(kinds)


@pytest.mark.parametrize("abstract, concrete, kind", [(1.0, 0.0, "abstract"), (0.0, 1.0, "concrete"),
                                                      (0.0, 0.0, "empty")])
def test_the_scripted_curator_writes_each_kind(env, abstract, concrete, kind):
    t = tasks(env)[1]
    names = {c: f"{c} {n}" for c, n in t["things"] + t["places"]}
    found = [f"put {names[a]} on {names[b]}" for a, b in t["recipe"][:2]]
    cfg = TextWorldConfig(**{**env.cfg.__dict__, "demo_abstract": abstract, "demo_concrete": concrete})
    ep = TextWorldEnv(cfg).new_episode({**t, "skill": "", "found": found}, random.Random(0), "curate")
    ep.start()
    done = ep.step(ep.expert_action())
    assert done.info[f"doc_{kind}"] and done.info["doc_right"] == (kind == "abstract")
    if kind == "concrete":
        nouns = [f"{names[a].split()[1]} on {names[b].split()[1]}" for a, b in t["recipe"][:2]]
        assert done.info["skill"] == " ".join(nouns)


def test_the_warm_start_key_covers_the_families_code(env):
    """An edit of the demonstrator or of the demo chains builds a new warm start (textworld imports its
    families)."""
    from common.warmstart import warm_start_code

    families = {"envs.benchmarks.textworld.games", "envs.benchmarks.textworld.families",
                "envs.benchmarks.textworld.family_games", "envs.benchmarks.textworld.family_splits"}
    assert families <= set(warm_start_code(env))
