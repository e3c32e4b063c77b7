"""The search's scheduler (kdbert.compress.schedule): which run starts next, on hand-made segments."""

from __future__ import annotations

import numpy as np
import pytest

from kdbert.compress.recipes import SearchSettings
from kdbert.compress.schedule import (Goal, Job, epoch_steps, last_step, next_job, pick_winner, promotion_order,
                                     ranked_candidates, rung_steps, stalled)
from kdbert.errors import KdbertError

ORDER = ["bert-1x128", "bilstm-h150", "bert-2x128", "mobilebert-2x384"]
LATENCY = {"bert-1x128": 0.2, "bilstm-h150": 0.3, "bert-2x128": 0.4, "mobilebert-2x384": 0.8}
STEPS = SearchSettings(first_steps=100, round_share="steps")


def done(candidate, rung, steps, score, trained=None, train_seconds=10.0, seconds=12.0, loss=None):
    segment = {"candidate": candidate, "rung": rung, "state": "done", "steps": steps,
               "trained": steps if trained is None else trained, "score": score,
               "train_seconds": train_seconds, "seconds": seconds}
    return {**segment, **({"loss": loss} if loss is not None else {})}


def running(candidate, rung):
    return {"candidate": candidate, "rung": rung, "state": "running"}


def goal(teacher=90.0, min_kept=0.97):
    return Goal(teacher, min_kept, LATENCY)


def job(segments, now=0.0, window_end=1000.0, first_round_end=300.0, settings=STEPS, target=None):
    return next_job(ORDER, segments, settings, target or goal(), now, window_end, first_round_end)


def test_round_0_starts_with_the_first_candidate_of_each_family():
    assert job([]) == Job("bert-1x128", 0, 100)  # the search's first run starts whatever its cost
    first = [done("bert-1x128", 0, 100, 50.0)]
    assert job(first, now=12.0) == Job("bilstm-h150", 0, 100)  # a new family before bert-2x128
    two = first + [done("bilstm-h150", 0, 100, 60.0)]
    assert job(two, now=24.0) == Job("mobilebert-2x384", 0, 100)
    # a family's first run starts whenever it fits the window, even past round 0's share
    assert job(two, now=24.0, first_round_end=24.0) == Job("mobilebert-2x384", 0, 100)
    # each run: 0.1 s a step and 2 s outside the loop, so a rung-0 run takes 12 s: bert-2x128's would end
    # past round 0's share and does not start; of three done at rung 0 the best goes on (floor(3 / 2) = 1)
    three = two + [done("mobilebert-2x384", 0, 100, 40.0)]
    assert job(three, now=36.0, first_round_end=47.0) == Job("bilstm-h150", 1, 200)
    assert job(three, now=36.0, first_round_end=48.0) == Job("bilstm-h150", 1, 200)  # promotions first
    assert job(three + [running("bilstm-h150", 1)], now=36.0, first_round_end=48.0) == Job("bert-2x128", 0, 100)
    assert job(three + [running("bilstm-h150", 1)], now=36.0, first_round_end=47.0) is None


def test_augmented_twins_start_within_round_0s_share_after_promotions_not_as_a_family_of_their_own():
    order = ["bilstm-h150", "bilstm-h150-aug", "bert-1x128", "bert-1x128-aug"]
    latency = {name: LATENCY[name.removesuffix("-aug")] for name in order}

    def twin_job(segments, now, first_round_end):
        return next_job(order, segments, STEPS, Goal(90.0, 0.97, latency), now, 1000.0, first_round_end)

    first = [done("bilstm-h150", 0, 100, 60.0)]
    assert twin_job(first, 12.0, 300.0) == Job("bert-1x128", 0, 100)  # the next kind, not the BiLSTM's twin
    # both kinds reached: the better goes on (floor(2 / 2) = 1) before the twins' first runs
    kinds = first + [done("bert-1x128", 0, 100, 50.0)]
    assert twin_job(kinds, 24.0, 300.0) == Job("bilstm-h150", 1, 200)
    promoted = kinds + [running("bilstm-h150", 1)]
    assert twin_job(promoted, 24.0, 300.0) == Job("bilstm-h150-aug", 0, 100)
    # a twin's first run (12 s: 100 steps at 0.1 s and 2 s outside the loop) starts only within round 0's share
    assert twin_job(promoted, 24.0, 35.9) is None


def test_a_candidate_left_alone_goes_on_until_the_window_ends_it():
    one = [done("bert-1x128", 0, 100, 50.0)]

    def alone(now, window_end):  # one family: bert-2x128 starts only within round 0's share (12 s)
        return next_job(["bert-1x128", "bert-2x128"], one, STEPS, goal(), now, window_end, first_round_end=12.0)

    # floor(1 / 2) = 0 promote: the lone candidate goes on (ceil)
    assert alone(12.0, 1000.0) == Job("bert-1x128", 1, 200)
    # 100 more steps at 0.1 s plus 2 s end at 24 s, past a window ending at 23 s: nothing starts
    assert alone(12.0, 23.0) is None
    # at rung 2 (400 steps: 200 more, 22 s) it starts when first_steps more (12 s) fit, and the window's
    # end stops it
    two = one + [done("bert-1x128", 1, 200, 60.0, trained=100)]
    assert next_job(["bert-1x128"], two, STEPS, goal(), 24.0, 46.0, 12.0) == Job("bert-1x128", 2, 400)
    assert next_job(["bert-1x128"], two, STEPS, goal(), 24.0, 36.0, 12.0) == Job("bert-1x128", 2, 400)
    assert next_job(["bert-1x128"], two, STEPS, goal(), 24.0, 35.9, 12.0) is None


def test_asha_promotes_the_top_half_of_a_rung_highest_rung_first_and_not_twice():
    rung0 = [done("bert-1x128", 0, 100, 50.0), done("bilstm-h150", 0, 100, 70.0),
             done("bert-2x128", 0, 100, 65.0, loss=0.4), done("mobilebert-2x384", 0, 100, 65.0, loss=0.3)]
    assert job(rung0, now=50.0) == Job("bilstm-h150", 1, 200)
    # bilstm-h150 runs rung 1: the next of the top two (a tie on score broken by the lower loss)
    assert job(rung0 + [running("bilstm-h150", 1)], now=50.0) == Job("mobilebert-2x384", 1, 200)
    both = rung0 + [done("bilstm-h150", 1, 200, 75.0, trained=100), running("mobilebert-2x384", 1)]
    assert job(both, now=60.0) is None  # nothing else may go on while mobilebert-2x384 runs
    rung1 = rung0 + [done("bilstm-h150", 1, 200, 75.0, trained=100), done("mobilebert-2x384", 1, 200, 80.0,
                                                                          trained=100)]
    assert job(rung1, now=70.0) == Job("mobilebert-2x384", 2, 400)  # the highest rung first


def test_once_a_candidate_keeps_the_share_only_candidates_as_fast_go_on():
    # the three of the issue: all keep 100%; the fastest is the winner and the only one worth training on
    kept = [done("bert-1x128", 0, 100, 90.0), done("bilstm-h150", 0, 100, 92.0),
            done("mobilebert-2x384", 0, 100, 95.0), done("bert-2x128", 0, 100, 60.0)]
    assert promotion_order(ORDER, 0, kept, goal()) == ["bert-1x128"]
    assert job(kept, now=50.0) == Job("bert-1x128", 1, 200)
    assert pick_winner(kept, goal())["candidate"] == "bert-1x128"
    # none keeps 97% of 100: all may still win, best score first
    assert promotion_order(ORDER, 0, kept, goal(teacher=100.0)) == [
        "mobilebert-2x384", "bilstm-h150", "bert-1x128", "bert-2x128"]


def test_a_near_tie_within_the_margin_of_the_standard_errors_is_promoted_by_speed_once_one_keeps():
    # SST-2's first rung: MobileBERT 84.80 (se 0.62), the BiLSTM 84.32 (se 0.62); the margin of their
    # difference is sqrt(0.62^2 + 0.62^2) = 0.8768, and 84.80 - 84.32 = 0.48 is within it. Against a
    # teacher at 86.5 MobileBERT keeps 0.97 beyond its error (the line 83.905 <= 84.80 - 0.62; the BiLSTM
    # does not, 84.32 - 0.62 = 83.70), so the faster BiLSTM, tied, goes first; against one at 87.0 (the
    # line 84.39) it keeps by less than its error, and the best goes first
    latency = {"bilstm-h150": 0.433, "mobilebert-2x384": 1.922, "bert-1x128": 0.291}
    rung0 = [done("bert-1x128", 0, 300, 80.50), done("bilstm-h150", 0, 824, 84.32),
             done("mobilebert-2x384", 0, 300, 84.80)]
    with_errors = [{**row, "se": 0.62} for row in rung0]
    sst2 = Goal(86.5, 0.97, latency)
    assert Goal.margin(0.62, 0.62) == pytest.approx(0.8768, abs=5e-5)
    assert promotion_order(list(latency), 0, with_errors, sst2) == ["bilstm-h150", "mobilebert-2x384", "bert-1x128"]
    assert promotion_order(list(latency), 0, with_errors, Goal(87.0, 0.97, latency))[0] == "mobilebert-2x384"
    # against the teacher of that search (89.77) none keeps: the best score goes on first, tie or not
    assert promotion_order(list(latency), 0, with_errors, Goal(89.77, 0.97, latency)) == [
        "mobilebert-2x384", "bilstm-h150", "bert-1x128"]
    # standard errors of 0.2 (margin 0.283): the half-point lead stands
    assert promotion_order(list(latency), 0, [{**row, "se": 0.2} for row in rung0], Goal(87.0, 0.97, latency)) == [
        "mobilebert-2x384", "bilstm-h150", "bert-1x128"]
    # errors unknown: score alone, as before
    assert promotion_order(list(latency), 0, rung0, Goal(87.0, 0.97, latency)) == [
        "mobilebert-2x384", "bilstm-h150", "bert-1x128"]
    # the tie is measured from the best left, not chained: margin sqrt(2) * 2.1 = 2.97, so 88 ties with 90
    # and 86 does not, even though it is within 2.97 of 88
    chain = [{**done(name, 0, 300, score), "se": 2.1} for name, score in
             (("mobilebert-2x384", 90.0), ("bilstm-h150", 88.0), ("bert-1x128", 86.0))]
    assert promotion_order(list(latency), 0, chain, Goal(90.0, 0.97, latency)) == [  # 90 - 2.1 keeps 0.97 of 90
        "bilstm-h150", "mobilebert-2x384", "bert-1x128"]


def test_while_none_keeps_the_share_the_best_score_is_promoted_whatever_its_speed():
    # MRPC at 8x against the MPNet teacher (picking rows: 88.0): the pre-trained 3-layer cut led the
    # first round by 3.32 points, within the margin sqrt(2.66^2 + 2.78^2) = 3.85 of mpnet-1x128's
    # score; speed gave mpnet-1x128 the next rung three times. None keeps 0.97 (85.36): the cut goes on
    latency = {"pretrained-minilm-l3": 0.57, "mpnet-1x128": 0.077, "bilstm-h150": 0.09}
    rung0 = [{**done("mpnet-1x128", 0, 300, 77.59), "se": 2.78}, {**done("bilstm-h150", 0, 672, 79.03), "se": 2.74},
             {**done("pretrained-minilm-l3", 0, 300, 80.91), "se": 2.66}]
    mrpc = Goal(88.0, 0.97, latency)
    assert promotion_order(list(latency), 0, rung0, mrpc) == ["pretrained-minilm-l3", "bilstm-h150", "mpnet-1x128"]
    # its next rung: past the 300 steps it has, by its rung's increment (first_steps 100)
    assert next_job(list(latency), rung0, STEPS, mrpc, 50.0, 1000.0, 300.0) == Job("pretrained-minilm-l3", 1, 400)


def test_while_none_keeps_the_share_a_near_tie_goes_to_the_slower_candidate():
    # the main job (SST-2, 344 rows that pick, teacher 88.37): at 200 steps bert-1x384-ffn384 led
    # bert-2x384-ffn384 by 81.69 - 79.94 = 1.75, within the margin sqrt(2.08^2 + 2.13^2) = 2.977; the
    # 2-layer ends higher, so it goes on; bert-1x384-ffn768 at 77.33 is 4.36 below the best, untied
    latency = {"bert-1x384-ffn384": 0.53, "bert-2x384-ffn384": 0.78, "bert-1x384-ffn768": 0.70}
    rung = [{**done("bert-1x384-ffn384", 1, 200, 81.69), "se": 2.08},
            {**done("bert-2x384-ffn384", 1, 200, 79.94), "se": 2.13},
            {**done("bert-1x384-ffn768", 1, 200, 77.33), "se": 2.24}]
    sst2 = Goal(88.37, 0.97, latency)  # the line: 85.72
    assert Goal.margin(2.08, 2.13) == pytest.approx(2.977, abs=5e-4)
    assert promotion_order(list(latency), 1, rung, sst2) == ["bert-2x384-ffn384", "bert-1x384-ffn384",
                                                             "bert-1x384-ffn768"]
    # 2.98 apart, just past the margin: the lead stands
    apart = [rung[0], {**rung[1], "score": 81.69 - 2.98}, rung[2]]
    assert promotion_order(list(latency), 1, apart, sst2)[:2] == ["bert-1x384-ffn384", "bert-2x384-ffn384"]
    # once one keeps the share by more than its standard error (a teacher at 82.0: the line 79.54 <=
    # 81.69 - 2.08), the tie goes to speed; by less (a teacher at 84.0: the line 81.48), it does not
    assert promotion_order(list(latency), 1, rung, Goal(82.0, 0.97, latency))[0] == "bert-1x384-ffn384"
    assert promotion_order(list(latency), 1, rung, Goal(84.0, 0.97, latency))[0] == "bert-2x384-ffn384"
    # an AMX Xeon's main job at rung 4: bert-2x256-ffn512 86.63 +- 1.80 against the line 0.97 * 88.66 = 86.00,
    # bert-1x384-ffn384 (6.45x) 85.47 +- 1.90, tied (margin 2.62): the deeper goes on, not the faster
    latency = {"bert-2x256-ffn512": 4.0 / 4.82, "bert-1x384-ffn384": 4.0 / 6.45}
    rung4 = [{**done("bert-2x256-ffn512", 4, 1673, 86.63), "se": 1.80},
             {**done("bert-1x384-ffn384", 4, 1670, 85.47), "se": 1.90}]
    amx = Goal(88.66, 0.97, latency, lead_cuts={"bert-2x256-ffn512": 2, "bert-1x384-ffn384": 1})
    assert amx.keeps(86.63) and not amx.keeps_clearly(rung4[0])
    assert promotion_order(list(latency), 4, rung4, amx) == ["bert-2x256-ffn512", "bert-1x384-ffn384"]
    # capacity is the teacher's whole width before latency: the main job's rung 0, where mobilebert-2x384
    # (4.86x, 200 steps) near-tied bert-2x384-ffn384 (6.02x, 100 steps) 80.52 to 80.81, margin
    # sqrt(2.14^2 + 2.16^2) = 3.04; by latency alone the slower mobilebert would go on
    latency = {"bert-2x384-ffn384": 0.83, "mobilebert-2x384": 1.03}
    rung0 = [{**done("bert-2x384-ffn384", 0, 100, 80.81), "se": 2.14},
             {**done("mobilebert-2x384", 0, 200, 80.52), "se": 2.16}]
    assert promotion_order(list(latency), 0, rung0, Goal(88.37, 0.97, latency))[0] == "mobilebert-2x384"
    whole = Goal(88.37, 0.97, latency, lead_cuts={"bert-2x384-ffn384": 2})
    assert promotion_order(list(latency), 0, rung0, whole) == ["bert-2x384-ffn384", "mobilebert-2x384"]
    # within the whole width, capacity is the slowest likely to ship at the speedup asked: the main job's
    # rung 0, bert-2x384-ffn384 admitted at 4.04x (4.04 * 0.912 = 3.68 < 4) near-tied bert-2x384-ffn192
    # (4.45x) 79.36 to 80.81, margin sqrt(2.15^2 + 2.15^2) = 3.04
    latency = {"bert-2x384-ffn192": 4.0 / 4.45, "bert-2x384-ffn384": 4.0 / 4.04}
    rung0 = [{**done("bert-2x384-ffn192", 0, 100, 80.81), "se": 2.15},
             {**done("bert-2x384-ffn384", 0, 100, 79.36), "se": 2.15}]
    both = {"bert-2x384-ffn192": 2, "bert-2x384-ffn384": 2}
    assert promotion_order(list(latency), 0, rung0, Goal(88.37, 0.97, latency, lead_cuts=both))[0] == \
        "bert-2x384-ffn384"
    risky = Goal(88.37, 0.97, latency, lead_cuts=both, ship_risk={"bert-2x384-ffn384": 0.24})
    assert promotion_order(list(latency), 0, rung0, risky) == ["bert-2x384-ffn192", "bert-2x384-ffn384"]
    # of two at risk, the likelier to ship: an AVX2 EPYC's rung 1, ffn192 admitted at 4.41x (64%) and
    # ffn384 at 4.07x (24%), 75.76 to 76.49, margin about 2.3; by latency the riskier went on
    both_risky = Goal(88.37, 0.97, latency, lead_cuts=both,
                      ship_risk={"bert-2x384-ffn192": 0.64, "bert-2x384-ffn384": 0.24})
    assert promotion_order(list(latency), 0, rung0, both_risky) == ["bert-2x384-ffn192", "bert-2x384-ffn384"]
    swapped = Goal(88.37, 0.97, latency, lead_cuts=both,
                   ship_risk={"bert-2x384-ffn192": 0.24, "bert-2x384-ffn384": 0.64})
    assert promotion_order(list(latency), 0, rung0, swapped) == ["bert-2x384-ffn384", "bert-2x384-ffn192"]
    # then the deeper: an AMX Xeon's rung 2, bert-1x384 (4.94x) near-tied bert-2x256-ffn512 (4.96x)
    # 81.40 to 83.43, margin sqrt(2.12^2 + 1.97^2) = 2.89; by latency alone the 1-layer cut went on
    latency = {"bert-1x384": 4.0 / 4.94, "bert-2x256-ffn512": 4.0 / 4.96}
    rung2 = [{**done("bert-1x384", 2, 418, 81.40), "se": 2.12},
             {**done("bert-2x256-ffn512", 2, 418, 83.43), "se": 1.97}]
    lead = Goal(88.66, 0.97, latency, lead_cuts={"bert-1x384": 1, "bert-2x256-ffn512": 2})
    assert promotion_order(list(latency), 2, rung2, lead) == ["bert-2x256-ffn512", "bert-1x384"]
    rung2 = [{**done("bert-1x384", 2, 418, 83.43), "se": 1.97},  # the scores swapped: still a tie
             {**done("bert-2x256-ffn512", 2, 418, 81.40), "se": 2.12}]
    assert promotion_order(list(latency), 2, rung2, lead) == ["bert-2x256-ffn512", "bert-1x384"]


def test_a_candidate_that_ships_at_the_target_less_than_three_times_in_four_is_a_risk():
    from kdbert.compress.budget import SHIP_CHANCE, SHIPPED_OVER_ADMITTED, SHIPPED_SPREAD, ship_at_risk, ship_chance

    assert (SHIPPED_OVER_ADMITTED, SHIPPED_SPREAD, SHIP_CHANCE) == (0.932, 0.072, 0.75)
    # Phi((4.19 * 0.932 - 4) / (4.19 * 0.072)) = Phi(-0.3146) = 0.3765; 4.53: Phi(0.6805) = 0.7519;
    # 4.52: Phi(0.6534) = 0.7432; 4.44 (bert-2x384-ffn768, 3.37x as shipped): Phi(0.4319) = 0.6671
    assert ship_chance(4.19, 4.0) == pytest.approx(0.3765, abs=1e-3)
    assert ship_chance(4.53, 4.0) == pytest.approx(0.7519, abs=1e-3)
    assert ship_chance(4.52, 4.0) == pytest.approx(0.7432, abs=1e-3)
    assert ship_chance(4.44, 4.0) == pytest.approx(0.6671, abs=1e-3)
    assert ship_chance(4.0 / 0.932, 4.0) == pytest.approx(0.5)
    assert ship_at_risk(4.04, 4.0) and ship_at_risk(4.44, 4.0) and ship_at_risk(4.52, 4.0)
    assert not ship_at_risk(4.53, 4.0) and not ship_at_risk(4.8, 4.0)
    assert not ship_at_risk(1.0, None)  # a latency target: no line


def test_compress_names_each_ship_risk_with_its_admitted_speedup_and_chance():
    from kdbert.compress.budget import ship_risk_line, ship_risks

    admitted = {"bert-2x256-ffn512": 4.44, "bert-1x384": 4.8, "bert-2x384-ffn192": 4.19}
    risks = ship_risks(admitted, 4.0)
    assert list(risks) == ["bert-2x256-ffn512", "bert-2x384-ffn192"]  # 4.8x: Phi(1.85) = 97%, no risk
    assert risks["bert-2x256-ffn512"] == pytest.approx(0.6671, abs=1e-3)  # Phi(0.4319), as above
    assert risks["bert-2x384-ffn192"] == pytest.approx(0.3765, abs=1e-3)
    assert ship_risks(admitted, None) == {}  # a latency target: no line
    assert ship_risk_line(risks, admitted, 4.0) == (
        "ship risk: bert-2x256-ffn512 (admitted at 4.44x: 67%), bert-2x384-ffn192 (admitted at 4.19x: 38%) may time "
        "under 4x as shipped (by the speedups as shipped so far, 0.932 of the admitted ones, sd 0.072; a chance under "
        "75%), so a near-tie goes to the others first")


def test_the_rows_that_decide_never_order_a_promotion():
    rung0 = [{**done("bert-1x128", 0, 100, 80.0), "decide_score": 89.0},
             {**done("bilstm-h150", 0, 100, 85.0), "decide_score": 70.0}]
    assert promotion_order(ORDER, 0, rung0, goal(teacher=100.0)) == ["bilstm-h150", "bert-1x128"]


def test_the_winner_is_the_fastest_keeping_the_share_among_every_candidate_trained():
    segments = [done("bert-1x128", 0, 100, 88.0),  # 97.8% kept at rung 0, never promoted
                done("bilstm-h150", 0, 100, 85.0), done("bilstm-h150", 1, 200, 89.0, trained=100)]
    winner = pick_winner(segments, goal())
    assert (winner["candidate"], winner["steps"], winner["rule"]) == ("bert-1x128", 100, "fastest keeping 0.97")
    assert winner["kept"] == pytest.approx(88.0 / 90.0)
    fallback = pick_winner(segments, goal(teacher=100.0))  # none keeps: the best latest score
    assert (fallback["candidate"], fallback["steps"], fallback["rule"]) == (
        "bilstm-h150", 200, "none keeps 0.97: best score on all held-out rows")
    with pytest.raises(KdbertError, match="no candidate finished a run within --budget-minutes"):
        pick_winner([running("bert-1x128", 0)], goal())


def test_the_winner_is_decided_on_the_rows_that_decide_within_the_noise_margin():
    # the teacher decides at 90.0 (se 1.0): the line is 0.97 * 90 = 87.3, the margin of a student with
    # se 1.5 is sqrt(1.5^2 + (0.97 * 1.0)^2) = sqrt(2.25 + 0.9409) = 1.7863
    target = Goal(95.0, 0.97, LATENCY, teacher_decide=90.0, teacher_decide_se=1.0)
    assert target.line() == pytest.approx(87.3)
    assert target.margin(1.5, 0.97 * 1.0) == pytest.approx(1.7863, abs=5e-5)
    fast = {**done("bert-1x128", 0, 100, 99.0), "decide_score": 85.6, "decide_se": 1.5}  # short by 1.70: keeps
    slow = {**done("bilstm-h150", 0, 100, 80.0), "decide_score": 88.0, "decide_se": 1.5}
    winner = pick_winner([fast, slow], target)
    assert (winner["candidate"], winner["keeps"]) == ("bert-1x128", True)
    assert winner["kept"] == pytest.approx(85.6 / 90.0)  # the rows that decide, not the 99.0 that picked
    beyond = {**fast, "decide_score": 85.5}  # short by 1.80: beyond the margin
    ranking = ranked_candidates([beyond, slow], target)
    assert [(row["candidate"], row["keeps"]) for row in ranking] == [("bilstm-h150", True), ("bert-1x128", False)]
    # without an error the line is hard
    hard = Goal(95.0, 0.97, LATENCY, teacher_decide=90.0)
    assert hard.keeps_decided(87.3) and not hard.keeps_decided(87.29)


def test_a_run_scored_against_the_teacher_on_the_same_rows_is_ranked_on_the_paired_margin():
    from kdbert.core.metrics import bootstrap_standard_error, paired_bootstrap_standard_error

    # 100 deciding rows, all of class 1: the teacher right on 90, the student on 85 of those same rows
    references = np.ones(100, dtype=int)
    teacher = np.r_[np.ones(90, dtype=int), np.zeros(10, dtype=int)]
    student = np.r_[np.ones(85, dtype=int), np.zeros(15, dtype=int)]
    s, t = bootstrap_standard_error(["accuracy"], student, references), bootstrap_standard_error(["accuracy"], teacher, references)
    d = paired_bootstrap_standard_error(["accuracy"], student, teacher, references)  # what a run records
    goal = Goal(90.0, 0.97, LATENCY, teacher_decide=90.0, teacher_decide_se=t,
                teacher_decide_predictions=tuple(teacher.tolist()))
    # the margin derived from the three standard errors is the paired one of score - 0.97 * teacher, exactly
    # (the same resamples): Var(S - wT) = (1 - w) s^2 + (w^2 - w) t^2 + w d^2
    margin, kind = goal.decide_margin(s, d)
    assert kind == "paired"
    assert margin == pytest.approx(paired_bootstrap_standard_error(["accuracy"], student, teacher, references, 0.97),
                                   rel=1e-9)
    # by hand: the student is right on a subset of the teacher's rows, so S - 0.97 T = 0.03 * (85 right) - 0.97 *
    # (5 only the teacher's); per row a value of 0.03 (85 rows), -0.97 (5) or 0 (10): sd sqrt(E[x^2] - E[x]^2)
    rows = np.r_[np.full(85, 0.03), np.full(5, -0.97), np.zeros(10)]
    assert margin == pytest.approx(100 * rows.std() / 10, rel=0.1)  # 1,000 resamples: a few % Monte-Carlo error
    # 85.0 is short of the line 87.3 by 2.3: within the independent margin sqrt(s^2 + (0.97 t)^2) ~ 4.7, beyond the
    # paired ~ 2.2, so the ranking reads it as short once the run records its paired error
    row = {**done("bert-1x128", 0, 100, 99.0), "decide_score": 85.0, "decide_se": s}
    assert goal.decide_margin(s)[1] == "independent" and goal.decide_margin(s)[0] > 4.0
    assert ranked_candidates([row], goal)[0]["keeps"] is True
    assert ranked_candidates([{**row, "decide_paired_se": d}], goal)[0]["keeps"] is False


def test_when_none_keeps_the_share_the_best_score_on_all_held_out_rows_ships_however_near_a_faster_one():
    # SST-2 at 4x (2026-11-29): the teacher decides at 92.15 (se 1.45), so none keeps 0.97 (line 89.39, beyond the
    # margins); mobilebert-2x384 leads on both halves (84.5 picking, 82.85 deciding), bert-1x128 (3.3x faster)
    # follows (83.1, 81.40): within the margin of their standard errors, but every one meets the speed target
    # already, so the better estimate of quality ships: (84.5 + 82.85) / 2 = 83.675 against 82.25
    latency = {"bert-1x128": 0.14, "bilstm-h150": 0.21, "mobilebert-2x384": 0.45}
    sst2 = Goal(91.57, 0.97, latency, teacher_decide=92.15, teacher_decide_se=1.45)
    rows = [{**done(name, 0, 300, picked), "decide_score": score, "decide_se": se} for name, picked, score, se in
            (("bert-1x128", 83.1, 81.40, 2.10), ("mobilebert-2x384", 84.5, 82.85, 2.09),
             ("bilstm-h150", 78.0, 76.74, 2.20))]
    assert sst2.pooled(rows[1]) == pytest.approx(83.675)
    ranking = ranked_candidates(rows, sst2)
    assert [(row["candidate"], row["keeps"]) for row in ranking] == [
        ("mobilebert-2x384", False), ("bert-1x128", False), ("bilstm-h150", False)]
    assert ranking[0]["rule"] == "none keeps 0.97: best score on all held-out rows"
    assert ranking[0]["kept"] == pytest.approx(82.85 / 92.15)  # the figure stated: on the rows that decide
    # equal scores: the lower held-out loss, then the name
    level = [{**row, "score": 80.0, "decide_score": 80.0, "loss": loss} for row, loss in zip(rows, (0.5, 0.4, 0.4))]
    assert [row["candidate"] for row in ranked_candidates(level, sst2)] == [
        "bilstm-h150", "mobilebert-2x384", "bert-1x128"]


def test_when_none_keeps_the_share_neither_half_of_the_held_out_rows_alone_ranks():
    # CoLA at 4x of the MiniLM teacher (2026-11-30; teacher 23.97 on the 429 deciding rows, se 5.12): bert-3x256 led
    # every promotion (25.05 on the rows that pick, 5.82 deciding, 13.82 on dev); bilstm-h150 stopped at its first
    # run (-4.29 picking) and drew 7.98 on the deciding rows (2.57 on dev), within one standard error (5.4) of the
    # others there. Ranked on the rows that decide alone, the draw shipped
    latency = {"bert-3x256": 0.9, "bert-1x256": 0.3, "bilstm-h150": 0.12}
    cola = Goal(38.26, 0.97, latency, teacher_decide=23.97, teacher_decide_se=5.12, majority_decide=0.0)
    rows = [{**done(name, 0, steps, picked), "decide_score": score, "decide_se": se}
            for name, steps, picked, score, se in (("bert-3x256", 10230, 25.05, 5.82, 5.08),
                                                   ("bert-1x256", 5222, 17.51, 7.94, 4.92),
                                                   ("bilstm-h150", 300, -4.29, 7.98, 5.43))]
    ranking = ranked_candidates(rows, cola)
    assert [row["candidate"] for row in ranking] == ["bert-3x256", "bert-1x256", "bilstm-h150"]
    assert ranking[0]["kept"] == pytest.approx(5.82 / 23.97)  # stated on the rows that decide
    # CoLA at 8x of the MPNet teacher (2026-11-30; 427 rows pick, 429 decide): bilstm-h150's 25.73 on the rows that
    # pick is the best of its 13,813 steps' pauses (5.94 deciding, 10.31 dev); the whole MiniLM's 23.34 came from
    # one run of 300 steps (26.15 deciding, 21.19 dev). Ranked on the rows that pick alone, the BiLSTM shipped
    latency = {"bilstm-h150": 0.1, "pretrained-minilm-l6": 4.0}
    mpnet = Goal(57.21, 0.97, latency, teacher_decide=51.83, teacher_decide_se=4.82, majority_decide=0.0,
                 decide_weight=429 / 856)
    rows = [{**done("bilstm-h150", 5, 13813, 25.73), "decide_score": 5.94, "decide_se": 5.02},
            {**done("pretrained-minilm-l6", 0, 300, 23.34), "decide_score": 26.15, "decide_se": 5.33}]
    assert mpnet.pooled(rows[0]) == pytest.approx((427 * 25.73 + 429 * 5.94) / 856)
    assert [row["candidate"] for row in ranked_candidates(rows, mpnet)] == ["pretrained-minilm-l6", "bilstm-h150"]


def test_a_candidate_no_better_than_the_majority_class_on_the_deciding_rows_comes_after_every_one_that_is():
    # MRPC at 8x of the MPNet-base teacher (2026-11-29): mpnet-1x128 answers one class, 74.78 on the deciding rows,
    # the majority class's score there; bilstm-h150 (slower) 76.17
    latency = {"mpnet-1x128": 0.35, "bilstm-h150": 0.44}
    rows = [{**done("mpnet-1x128", 0, 300, 77.5), "decide_score": 74.78, "decide_se": 3.2},
            {**done("bilstm-h150", 0, 300, 80.0), "decide_score": 76.17, "decide_se": 3.1}]
    mrpc = Goal(86.73, 0.97, latency, teacher_decide=85.54, teacher_decide_se=2.48, majority_decide=74.78)
    assert not mrpc.informative(74.78) and mrpc.informative(74.79)
    ranking = ranked_candidates(rows, mrpc)
    assert [row["candidate"] for row in ranking] == ["bilstm-h150", "mpnet-1x128"]
    assert ranking[0]["rule"] == "none keeps 0.97: best score on all held-out rows"
    # a one-class model that scores above the majority class ranks by its score, as any other
    above = [{**rows[0], "decide_score": 77.0, "score": 81.0}, rows[1]]  # pooled 79.0 against 78.085
    assert [row["candidate"] for row in ranked_candidates(above, mrpc)] == ["mpnet-1x128", "bilstm-h150"]
    # a share "kept" at the majority class's score is not kept: RTE, teacher 56.45 (se 4.45), majority 54.84
    rte = Goal(64.0, 0.97, latency, teacher_decide=56.45, teacher_decide_se=4.45, majority_decide=54.84)
    at_majority = [{**rows[0], "decide_score": 54.84}, {**rows[1], "decide_score": 55.65}]
    ranking = ranked_candidates(at_majority, rte)
    assert [(row["candidate"], row["keeps"], row["rule"]) for row in ranking] == [
        ("bilstm-h150", True, "fastest keeping 0.97"), ("mpnet-1x128", False, "fastest keeping 0.97")]
    # none beats it: the best score on all held-out rows (66.0 against 64.5), and the rule says why
    below = [{**at_majority[0], "score": 82.0, "decide_score": 50.0}, {**at_majority[1], "decide_score": 49.0}]
    ranking = ranked_candidates(below, rte)
    assert ranking[0]["candidate"] == "mpnet-1x128" and ranking[0]["rule"] == (
        "none beats the majority class (54.84): best score on all held-out rows")


def test_the_majority_class_score_on_given_rows_is_the_constant_answer_of_the_training_labels():
    from types import SimpleNamespace

    from kdbert.compress.teacher import majority_score
    from kdbert.data.tasks import GLUE_TASKS

    labelled = lambda labels: [SimpleNamespace(label=label) for label in labels]  # noqa: E731
    data = SimpleNamespace(spec=GLUE_TASKS["sst2"], train=labelled([1, 1, 0]), dev={"dev": labelled([1, 1, 0, 1])})
    assert majority_score(data) == pytest.approx(75.0)  # answers 1: 3 of 4 right on dev
    assert majority_score(data, labelled([1, 0, 0, 0])) == pytest.approx(25.0)  # 1 of 4 on the given rows


def test_equal_time_gives_cheap_families_more_steps_and_tops_up_instead_of_rerunning():
    time_share = SearchSettings(first_steps=100, round_share="time")
    # BERT: 10 s for 100 steps (0.1 s a step); the BiLSTM: 1 s for 100 (0.01): mean 0.055
    segments = [done("bert-1x128", 0, 100, 50.0, train_seconds=10.0), done("bilstm-h150", 0, 100, 60.0,
                                                                           train_seconds=1.0, seconds=3.0)]
    assert rung_steps("bilstm-h150", 0, segments, time_share) == round(100 * 0.055 / 0.01) == 550
    assert rung_steps("bert-2x128", 0, segments, time_share) == 100  # never fewer than first_steps * eta^r
    assert rung_steps("bilstm-h150", 2, segments, time_share) == 2200
    assert job(segments, now=20.0, settings=time_share) == Job("mobilebert-2x384", 0, 100)  # a new family first
    # with MobileBERT's 0.1 s a step the mean is 0.07: the BiLSTM's rung 0 is 700 steps; it trained 100 before
    # its family's cost was known, so it continues to 700 before rung 0 is compared (a top-up, not a rerun)
    three = segments + [done("mobilebert-2x384", 0, 100, 40.0)]
    assert job(three, now=40.0, settings=time_share) == Job("bilstm-h150", 0, 700)
    # topped up (600 steps in 6 s), it is the best of three at rung 0 (floor(3 / 2) = 1 goes on); its rung 1
    # is 200 x mean / own = 200 x 0.055 / 0.01 steps (the mean now over four segments)
    topped = three + [done("bilstm-h150", 0, 700, 62.0, trained=600, train_seconds=6.0, seconds=8.0)]
    assert job(topped, now=48.0, settings=time_share) == Job("bilstm-h150", 1, 1100)
    promoted = topped + [running("bilstm-h150", 1)]
    assert job(promoted, now=40.0, settings=time_share) == Job("bert-2x128", 0, 100)


def test_a_promotion_always_goes_past_the_steps_a_candidate_has_trained():
    # bert-1x128's rung 0 ran 300 steps at equal time while its family looked cheap; by the time it is
    # promoted the mean cost has moved so that rung 1 would end at 200: it continues to 300 + 100 instead
    time_share = SearchSettings(first_steps=100, round_share="time")
    segments = [done("bert-1x128", 0, 300, 80.0, train_seconds=30.0), done("bilstm-h150", 0, 100, 70.0, train_seconds=10.0),
                done("bert-2x128", 0, 100, 60.0, train_seconds=10.0),
                done("mobilebert-2x384", 0, 100, 50.0, train_seconds=10.0)]
    assert rung_steps("bert-1x128", 1, segments, time_share) == 200  # mean 0.1 s/step = its own: 100 * 2
    promoted = job(segments, now=50.0, settings=time_share)
    assert promoted == Job("bert-1x128", 1, 400)


def test_a_candidate_whose_promotions_found_no_better_checkpoint_gives_its_time_to_the_others():
    rung0 = [done("bert-1x128", 0, 100, 74.0), done("bilstm-h150", 0, 100, 62.0),
             done("mobilebert-2x384", 0, 100, 69.0)]
    assert job(rung0, now=40.0) == Job("bert-1x128", 1, 200)  # floor(3 / 2) = 1: the best goes on
    once = rung0 + [done("bert-1x128", 1, 200, 74.0, trained=100)]  # 100 more steps, no better checkpoint
    # one promotion without a gain is noise: past round 0's share the leader goes on (ceil(1 / 2) of rung 1)
    assert not stalled("bert-1x128", once)
    assert job(once, now=60.0, first_round_end=50.0) == Job("bert-1x128", 2, 400)
    stuck = once + [done("bert-1x128", 2, 400, 74.0, trained=200)]  # STALL_PATIENCE = 2 in a row: stalled
    assert stalled("bert-1x128", stuck) and not stalled("mobilebert-2x384", stuck)
    # the stalled leader does not go on; the second of rung 0's top ceil(3 / 2) = 2 does
    assert job(stuck, now=80.0, first_round_end=50.0) == Job("mobilebert-2x384", 1, 200)
    # the BiLSTM, not among rung 0's top two, does not take the stalled one's place; a candidate never
    # started gets rung 0, past round 0's share
    both = stuck + [done("mobilebert-2x384", 1, 200, 69.0, trained=100)]
    assert job(both, now=100.0, first_round_end=50.0) == Job("bert-2x128", 0, 100)
    # nothing new is left and the only promotion has stalled: the best goes on anyway, until the window ends it
    last = both + [done("bert-2x128", 0, 100, 40.0)]
    assert job(last, now=120.0, first_round_end=50.0) == Job("bert-1x128", 3, 800)
    # a promotion that found a better checkpoint, however small the gain, ends the stall
    better = once + [done("bert-1x128", 2, 400, 74.5, trained=200)]
    assert not stalled("bert-1x128", better)
    assert job(better, now=80.0, first_round_end=50.0) == Job("bert-1x128", 3, 800)


def test_a_candidate_that_has_trained_its_max_epochs_is_done_and_its_place_goes_to_the_next():
    from kdbert.families.registry import Candidate

    capped = SearchSettings(first_steps=100, round_share="steps", max_epochs=3.5)
    # 640 training rows and 160 unlabelled at batch 32: 25 steps a pass; the -aug twin reads its 960
    # augmented rows instead of the unlabelled ones (50 steps); the BiLSTM (no start from weights) is not limited
    names = ["bert-1x128", "bert-1x128-aug", "bilstm-h150"]
    built = [Candidate(name, name.split("-")[0], (), build=print,
                       from_teacher=None if name.startswith("bilstm") else print) for name in names]
    assert epoch_steps(built, 640, 160, 960, 32) == {"bert-1x128": 25.0, "bert-1x128-aug": 50.0}
    limited = Goal(90.0, 0.97, LATENCY, epoch_steps={name: 100.0 for name in ORDER if name != "bilstm-h150"})
    assert last_step("bert-1x128", capped, limited) == 350  # ceil(3.5 x 100)
    assert last_step("bilstm-h150", capped, limited) == last_step("bert-1x128", STEPS, limited) == 100 * 2 ** 7 * 16
    assert last_step("bert-1x128", SearchSettings(first_steps=100, max_epochs=0.1), limited) == 100  # a rung at least
    rung0 = [done("bert-1x128", 0, 100, 74.0), done("bilstm-h150", 0, 100, 62.0),
             done("mobilebert-2x384", 0, 100, 69.0), done("bert-2x128", 0, 100, 40.0)]
    twice = rung0 + [done("bert-1x128", 1, 200, 75.0, trained=100), done("mobilebert-2x384", 1, 200, 70.0, trained=100)]
    # the leader's rung 2 ends at its 3.5 epochs, not at 400 steps
    assert job(twice, now=60.0, settings=capped, target=limited) == Job("bert-1x128", 2, 350)
    assert rung_steps("bert-1x128", 2, twice, capped, limited) == 350 and rung_steps("bert-1x128", 2, twice, capped) == 400
    # a rung that would leave less than first_steps to the limit goes to it: at 2.5 epochs rung 1 ends at 250, not 200
    assert rung_steps("bert-1x128", 1, twice, SearchSettings(first_steps=100, round_share="steps", max_epochs=2.5),
                      limited) == 250
    # once it has trained them it goes no further: rung 1's next, mobilebert, goes on in its place
    finished = twice + [done("bert-1x128", 2, 350, 75.5, trained=150)]
    assert job(finished, now=80.0, first_round_end=50.0, settings=capped, target=limited) == Job("mobilebert-2x384", 2, 350)
    # without a limit the leader goes on to its rung 3
    assert job(finished, now=80.0, first_round_end=50.0, settings=STEPS, target=limited) == Job("bert-1x128", 3, 800)


def test_near_the_windows_end_the_leader_goes_on_before_new_candidates_start():
    # the main job: bert-1x128 led every rung to 800 steps (0.1 s a step, 2 s outside the loop; every kind
    # has run, bert-2x128 has not, the BiLSTM was promoted once); its
    # next rung (800 more steps, 82 s) does not fit the 50 s left, a new candidate's rung 0 (12 s) would:
    # past round 0's share the leader trains on until the window's end stops it
    rungs = [done("bert-1x128", 0, 100, 70.0), done("bilstm-h150", 0, 100, 60.0), done("mobilebert-2x384", 0, 100, 50.0),
             done("bert-1x128", 1, 200, 72.0, trained=100), done("bilstm-h150", 1, 200, 61.0, trained=100),
             done("bert-1x128", 2, 400, 74.0, trained=200, train_seconds=20.0, seconds=22.0),
             done("bert-1x128", 3, 800, 76.0, trained=400, train_seconds=40.0, seconds=42.0)]
    assert job(rungs, now=950.0, window_end=1000.0, first_round_end=300.0) == Job("bert-1x128", 4, 1600)
    # with the time to train it whole, it goes on whole
    assert job(rungs, now=100.0, window_end=1000.0, first_round_end=50.0) == Job("bert-1x128", 4, 1600)
    # once it has stalled, the time goes to a new candidate
    stuck = rungs + [done("bert-1x128", 4, 1600, 76.0, trained=800, train_seconds=80.0, seconds=82.0),
                     done("bert-1x128", 5, 3200, 75.0, trained=1600, train_seconds=160.0, seconds=162.0)]
    assert stalled("bert-1x128", stuck)
    assert job(stuck, now=950.0, window_end=1000.0, first_round_end=300.0) == Job("bert-2x128", 0, 100)


def test_near_the_windows_end_only_a_candidate_within_reach_of_winning_goes_on_before_the_leader():
    # mobilebert-2x384 leads at rung 3 (800 steps); the BiLSTM, second at rung 0, is due its rung 1
    def rungs(leader, bilstm):
        return [{**done("mobilebert-2x384", 0, 100, 74.0), "se": 2.0},
                {**done("mobilebert-2x384", 1, 200, 80.5, trained=100), "se": 2.0},
                {**done("mobilebert-2x384", 2, 400, 82.0, trained=200, train_seconds=20.0, seconds=22.0), "se": 2.0},
                {**done("mobilebert-2x384", 3, 800, leader, trained=400, train_seconds=40.0, seconds=42.0), "se": 2.0},
                {**done("bert-1x128", 0, 100, 76.0), "se": 2.0}, {**done("bert-1x128", 1, 200, 80.0, trained=100), "se": 2.0},
                {**done("bilstm-h150", 0, 100, bilstm), "se": 2.0}, {**done("bert-2x128", 0, 100, 73.0), "se": 2.0}]

    far = rungs(leader=84.0, bilstm=75.0)
    assert job(far, now=100.0, first_round_end=50.0) == Job("bilstm-h150", 1, 200)  # time enough: ASHA's order
    # 50 s left: the leader's rung 4 (800 more steps, 82 s) does not fit whole, 100 more steps do; none keeps
    # 87.3 (0.97 of 90) and the BiLSTM's 75.0 is 9.0 under the leader's 84.0, beyond sqrt(2^2 + 2^2) = 2.8
    assert job(far, now=950.0, first_round_end=50.0) == Job("mobilebert-2x384", 4, 1600)
    # 2.0 under it, within the margin: it could still win, and goes on first
    assert job(rungs(leader=84.0, bilstm=82.0), now=950.0, first_round_end=50.0) == Job("bilstm-h150", 1, 200)
    # once the leader keeps the share (91.0 >= 87.3), a faster candidate wins if it reaches the line, not
    # the leader's score: the BiLSTM at 85.5 is 1.8 under it, within its own 2.0, at 75.0 not
    assert job(rungs(leader=91.0, bilstm=85.5), now=950.0, first_round_end=50.0) == Job("bilstm-h150", 1, 200)
    assert job(rungs(leader=91.0, bilstm=75.0), now=950.0, first_round_end=50.0) == Job("mobilebert-2x384", 4, 1600)


def test_round_zero_gets_its_share_of_the_window_less_the_teachers_labelling():
    from kdbert.compress.search import Window

    # 600 s, a third to round 0: 200 s without labelling; with 120 s of labelling, 120 + 480 / 3 = 280 s
    assert Window.from_now(600, 1 / 3, now=1000) == Window(1600, 1200)
    assert Window.from_now(600, 1 / 3, now=1000, labelling_seconds=120) == Window(1600, 1280)
    # labelling longer than the window: round 0 may start candidates until the end
    assert Window.from_now(600, 1 / 3, now=1000, labelling_seconds=900) == Window(1600, 1600)
