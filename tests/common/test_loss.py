"""The clipped loss, its gradient, aggregation and the KL estimators against slow references."""

import math

import pytest
import torch

from common.loss import aggregate, clipped_surrogate, entropy_from_logits, kl_estimate


def slow_ppo_loss(logits, actions, old_logp, adv, eps_low, eps_high):
    """Token by token, plain Python floats where possible: -min(rho A, clip(rho) A), token mean."""
    total = 0
    for i, a in enumerate(actions):
        logp = torch.log_softmax(logits[i], -1)[a]
        rho = torch.exp(logp - old_logp[i])
        unclipped = rho * adv[i]
        clipped = torch.clamp(rho, 1 - eps_low, 1 + eps_high) * adv[i]
        total = total + (-torch.min(unclipped, clipped))
    return total / len(actions)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clipped_loss_and_gradient_match_slow_reference(seed):
    g = torch.Generator().manual_seed(seed)
    n, v = 12, 5  # a categorical toy policy: 12 independent decisions over 5 actions
    logits = torch.randn(n, v, generator=g)
    actions = torch.randint(v, (n,), generator=g)
    old_logp = torch.log_softmax(logits + 0.5 * torch.randn(n, v, generator=g), -1)[torch.arange(n), actions]
    adv = torch.randn(n, generator=g)

    a = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(a, -1)[torch.arange(n), actions]
    per_token, clipped = clipped_surrogate(logp[None], old_logp[None], adv[None], 0.2, 0.28)
    loss = aggregate(per_token, torch.ones(1, n), "token-mean", n, 1)
    loss.backward()

    b = logits.clone().requires_grad_(True)
    ref = slow_ppo_loss(b, actions.tolist(), old_logp, adv, 0.2, 0.28)
    ref.backward()
    assert torch.allclose(loss, ref, atol=1e-6)
    assert torch.allclose(a.grad, b.grad, atol=1e-6)
    assert clipped.any() and not clipped.all()  # the case exercises both branches


def test_clipped_tokens_have_no_gradient():
    logp = torch.tensor([[math.log(2.0)]], requires_grad=True)  # ratio 2 > 1.2 with A > 0 -> clipped
    per_token, clipped = clipped_surrogate(logp, torch.zeros(1, 1), torch.ones(1, 1), 0.2, 0.2)
    per_token.sum().backward()
    assert clipped.item() and logp.grad.item() == 0.0
    assert per_token.item() == pytest.approx(-1.2)


def test_ratio_one_gives_minus_advantage_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[0.5, -1.0]])
    per_token, clipped = clipped_surrogate(logp, logp.detach(), adv, 0.2, 0.2)
    aggregate(per_token, torch.ones(1, 2), "token-mean", 2, 1).backward()
    assert not clipped.any()
    assert torch.allclose(logp.grad, -adv / 2)


def test_aggregation_token_mean_vs_seq_mean():
    x = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(x, mask, "token-mean", 4, 2).item() == pytest.approx(7 / 4)
    assert aggregate(x, mask, "seq-mean", 4, 2).item() == pytest.approx((1 + 4) / 2)
    # chunks of one minibatch add up to its mean
    parts = aggregate(x[:1], mask[:1], "token-mean", 4, 2) + aggregate(x[1:], mask[1:], "token-mean", 4, 2)
    assert parts.item() == pytest.approx(7 / 4)
    with pytest.raises(ValueError):
        aggregate(x, mask, "sum", 4, 2)


def exact_kl(p, q):
    return float((p * (p / q).log()).sum())


def test_kl_estimators_against_exact_kl():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.5, 0.3])
    true = exact_kl(p, q)
    logp, logq = p.log(), q.log()
    # exact expectations under p
    e = {k: float((p * kl_estimate(logp, logq, k)).sum()) for k in ("k1", "k2", "k3")}
    assert e["k1"] == pytest.approx(true, abs=1e-6)  # unbiased
    assert e["k3"] == pytest.approx(true, abs=1e-6)  # unbiased
    assert e["k2"] != pytest.approx(true, abs=1e-3)  # biased
    # Monte Carlo: k3 has lower variance than k1 and is never negative
    g = torch.Generator().manual_seed(0)
    x = torch.multinomial(p, 200_000, replacement=True, generator=g)
    k1 = kl_estimate(logp[x], logq[x], "k1")
    k3 = kl_estimate(logp[x], logq[x], "k3")
    assert float(k1.mean()) == pytest.approx(true, abs=3e-3)
    assert float(k3.mean()) == pytest.approx(true, abs=3e-3)
    assert float(k3.var()) < float(k1.var())
    assert (k3 >= 0).all() and (k1 < 0).any()


def test_kl_estimators_zero_when_equal_and_unknown_raises():
    lp = torch.log(torch.tensor([0.1, 0.9]))
    for k in ("k1", "k2", "k3"):
        assert torch.allclose(kl_estimate(lp, lp, k), torch.zeros(2))
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(lp, lp, "k4")


def test_entropy_from_logits():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert entropy_from_logits(logits).item() == pytest.approx(expected)


@pytest.mark.parametrize("kind, expected", [("k1", "zero"), ("k2", "forward"), ("k3", "reverse")])
def test_kl_estimators_as_loss_terms_have_the_documented_expected_gradient(kind, expected):
    """E_{x~pi}[grad_theta k(x)] with the sample held fixed (how a loss term is differentiated), exactly
    over a 4-way categorical: k1 -> 0, k2 -> grad KL(pi || ref), k3 -> grad KL(ref || pi)."""
    theta = torch.tensor([0.3, -1.0, 0.5, 0.1], requires_grad=True)
    log_ref = torch.log_softmax(torch.tensor([-0.2, 0.4, 0.0, 1.0]), -1)
    logp = torch.log_softmax(theta, -1)
    pi = logp.exp().detach()
    (pi * kl_estimate(logp, log_ref, kind)).sum().backward()  # pi held fixed: the sampling distribution
    grad_estimator = theta.grad.clone()
    theta.grad = None
    logp = torch.log_softmax(theta, -1)
    if expected == "forward":
        (logp.exp() * (logp - log_ref)).sum().backward()
    elif expected == "reverse":
        (log_ref.exp() * (log_ref - logp)).sum().backward()
    else:
        (0 * theta).sum().backward()
    assert torch.allclose(grad_estimator, theta.grad, atol=1e-6), (grad_estimator, theta.grad)


def _batch(logp, old, adv, mask, entropy, ref=None):
    from common.loss import LossBatch

    return LossBatch(rows=[], adapter="policy", logp_B_T=logp, old_logp_B_T=old, behaviour_logp_B_T=old,
                     adv_B_T=adv, mask_B_T=mask, entropy_B_T=entropy, ref_logp_B_T=ref,
                     num_tokens=int(mask.sum()), num_rows=mask.size(0))


def test_policy_loss_assembles_every_term_by_hand():
    from common.config import TrainerConfig
    from common.loss import policy_loss

    t = TrainerConfig(clip_low=0.2, clip_high=0.2, entropy_coef=0.01)
    t.kl.placement, t.kl.coef, t.kl.estimator = "loss", 0.1, "k1"  # k1: its value is easy by hand
    logp = torch.tensor([[math.log(2.0), 0.0, 0.0]])  # token 0: ratio 2 (clipped for A > 0); token 2: padding
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    entropy = torch.tensor([[0.5, 1.5, 9.0]])
    ref = torch.tensor([[0.0, -0.5, 0.0]])
    terms = policy_loss(_batch(logp, old, adv, mask, entropy, ref), t, extra=torch.tensor(0.25))
    surrogate = [-min(2.0 * 1.0, 1.2 * 1.0), -min(1.0 * -1.0, 1.0 * -1.0)]  # [-1.2, 1.0]
    kl = [math.log(2.0) - 0.0, 0.0 + 0.5]  # k1 = logp - log_ref
    per_token = [s + 0.1 * k - 0.01 * h for s, k, h in zip(surrogate, kl, [0.5, 1.5], strict=True)]
    assert terms.loss.item() == pytest.approx(sum(per_token) / 2 + 0.25)
    assert terms.clip_fraction == 0.5 and terms.kl == pytest.approx(sum(kl) / 2)
    assert terms.entropy == pytest.approx(1.0) and terms.logprob_diff_max == pytest.approx(math.log(2.0))


def test_kl_placement_and_aggregation_are_registries():
    from common.config import TrainerConfig
    from common.loss import AGGREGATIONS, KL_PLACEMENTS, policy_loss

    assert (set(KL_PLACEMENTS) == {"none", "loss", "reward"}
            and set(AGGREGATIONS) == {"token-mean", "seq-mean"})
    logp, old = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -2.0]])
    adv, mask, ent = torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), torch.zeros(1, 2)
    t = TrainerConfig()
    # in the reward: the loss is the bare surrogate, the KL is logged
    t.kl.placement, t.kl.coef = "reward", 0.5
    terms = policy_loss(_batch(logp, old, adv, mask, ent, ref=logp - 1.0), t)
    # k3 at log r = -1
    assert terms.loss.item() == pytest.approx(-2.0) and terms.kl == pytest.approx(math.exp(-1.0) - 1 + 1.0)
    t.kl.placement = "none"
    assert policy_loss(_batch(logp, old, adv, mask, ent), t).kl is None
