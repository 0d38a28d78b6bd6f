import json

import numpy as np
import pytest
from conftest import write_lines
from typer.testing import CliRunner

from mushroom.cli.app import app
from mushroom.combine.stack import (
    Member,
    StackConfig,
    StackFit,
    StackModel,
    apply_stack,
    best_hard_sources,
    fit_logistic,
    fit_stack,
    nested_hard_sources,
    parse_members,
    stack_fingerprint,
    word_hard_mask,
)
from mushroom.data.channels import channel_file, read_channels, write_channels
from mushroom.data.predictions import load_predictions, prediction_from_vectors, submission_name
from mushroom.data.records import Item
from mushroom.data.spans import soft_to_vector
from mushroom.errors import MushroomError


def test_logistic_regression_recovers_coefficients_with_soft_targets():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2))
    p = 1 / (1 + np.exp(-(0.5 + 2.0 * x[:, 0] - 1.0 * x[:, 1])))
    design = np.hstack([np.ones((4000, 1)), x])
    beta = fit_logistic(design, p, np.ones(4000), l2=1e-6)  # soft targets: exact probabilities
    assert np.allclose(beta, [0.5, 2.0, -1.0], atol=1e-3)


def make_items(n, rng, empty_words=8):
    """Answers of 8 words; gold marks a random word per item, except every fourth (of `empty_words`)."""
    items = []
    for k in range(n):
        words = [f"w{k}x{j}" for j in range(8 if k % 4 else empty_words)]
        text = " ".join(words)
        hard, soft = [], []
        if k % 4:
            j = int(rng.integers(8))
            start = text.index(words[j])
            hard = [[start, start + len(words[j])]]
            soft = [{"start": start, "end": start + len(words[j]), "prob": 1.0}]
        items.append(
            Item(
                id=f"i{k}",
                lang="en",
                model_input="q",
                model_output_text=text,
                soft_labels=soft,
                hard_labels=hard,
            )
        )
    return items


def write_member(folder, items, make_vec, split="val", channel=None, lang="en"):
    preds = []
    for it in items:
        vec = make_vec(it)
        preds.append(prediction_from_vectors(it.id, vec, vec > 0.5).submission_dict())
    folder.mkdir(parents=True, exist_ok=True)
    write_lines(folder / submission_name(lang, split), preds)
    if channel is not None:
        write_channels(channel_file(folder / "raw", lang), {it.id: {"hint": channel(it)} for it in items})


def gold_vec(it):
    vec = np.zeros(len(it.model_output_text))
    for s, e in it.hard_labels:
        vec[s:e] = 1.0
    return vec


def test_saved_trees_predict_exactly_what_sklearn_fitted():
    """stack.json keeps the trees as plain node arrays; applying them must equal sklearn's model."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from mushroom.combine.stack.trees import TreeScorer, TreeSettings, fit_trees

    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, size=(3000, 4))
    x[rng.uniform(size=x.shape) < 0.05] = np.nan  # missing values take the learned side
    y = np.clip(np.nan_to_num(x[:, 0]) * (np.nan_to_num(x[:, 1]) > 0.5) + rng.normal(0, 0.05, 3000), 0, 1)
    w = rng.uniform(0.5, 1.5, 3000)
    settings = TreeSettings(
        iterations=30, learning_rate=0.05, max_depth=4, min_leaf_share=0.01, stride=1, max_bins=255
    )
    scorer = fit_trees(x, y, w, settings)
    reference = HistGradientBoostingRegressor(
        max_iter=30,
        learning_rate=0.05,
        max_depth=4,
        min_samples_leaf=30,
        l2_regularization=1.0,
        early_stopping=False,
        random_state=0,
    ).fit(x, y, sample_weight=w)
    test = rng.uniform(0, 1, size=(500, 4))
    test[:20, 1] = np.nan
    # "NaN goes right" splits have an infinite threshold in sklearn; JSON holds a finite one
    assert all(np.isfinite(t.threshold).all() for t in scorer.trees)
    assert np.allclose(scorer(test), np.clip(reference.predict(test), 0, 1), atol=1e-9)
    # and after a JSON round trip, as a stack.json holds it
    again = TreeScorer.model_validate_json(scorer.model_dump_json())
    assert np.array_equal(again(test), scorer(test))


def test_stack_learns_from_an_informative_member_and_a_channel(tmp_path):
    rng = np.random.default_rng(1)
    items = make_items(80, rng)
    noisy = {
        it.id: np.clip(gold_vec(it) * 0.4 + rng.uniform(0, 0.5, len(it.model_output_text)), 0, 1)
        for it in items
    }
    write_member(tmp_path / "a", items, lambda it: noisy[it.id], channel=lambda it: gold_vec(it) * 0.9)
    write_member(
        tmp_path / "b" / "predictions", items, lambda it: rng.uniform(0, 1, len(it.model_output_text))
    )
    members = parse_members([f"a={tmp_path / 'a'}", str(tmp_path / "b")])
    assert [m.name for m in members] == ["a", "b"]
    fit = fit_stack(members, {"en": items}, folds=4)
    comp = fit.comparison
    assert comp["stack (CV)"]["en"]["iou"] > 0.9 > comp["a"]["en"]["iou"]
    assert comp["stack (CV)"]["en"]["cor"] > comp["b"]["en"]["cor"]
    assert fit.model.channels == {"a": ["hint"], "b": []}
    assert fit.model.hard_from == "stack"
    assert len(fit.oof["en"]) == len(items)
    # save, load, apply to "test" files of the same members
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(fit.model.model_dump(mode="json")))
    model = StackModel.model_validate_json(path.read_text())
    write_member(
        tmp_path / "a", items, lambda it: noisy[it.id], split="test", channel=lambda it: gold_vec(it) * 0.9
    )
    write_member(
        tmp_path / "b" / "predictions",
        items,
        lambda it: rng.uniform(0, 1, len(it.model_output_text)),
        split="test",
    )
    preds = apply_stack(model, members, "test", {"en": items})["en"]
    assert [p.id for p in preds] == [it.id for it in items]
    hits = [
        [list(h) for h in p.hard_labels] == [list(h) for h in it.hard_labels] for p, it in zip(preds, items)
    ]
    assert np.mean(hits) > 0.9
    with pytest.raises(MushroomError, match="fitted on members"):
        apply_stack(model, members[::-1], "test", {"en": items})
    # a language whose hard labels come from a member: exactly that member's hard labels
    b_preds = load_predictions(tmp_path / "b" / "predictions" / submission_name("en", "test"))
    routed = apply_stack(
        model.model_copy(update={"hard_sources": {"en": "b"}}), members, "test", {"en": items}
    )
    assert [p.hard_labels for p in routed["en"]] == [b_preds[it.id].hard_labels for it in items]
    assert [p.soft_labels for p in routed["en"]] != [b_preds[it.id].soft_labels for it in items]
    # the whole fit saves and loads; the fingerprint moves when a member file changes
    fit.save(tmp_path / "fit.json")
    back = StackFit.load(tmp_path / "fit.json")
    assert back.model == fit.model and back.comparison == fit.comparison and len(back.folds) == 4
    assert back.oof["en"] == fit.oof["en"]
    assert stack_fingerprint(members, {"en": items}, folds=4) == fit.fingerprint() != ""
    assert stack_fingerprint(members, {"en": items}, folds=5) != fit.fingerprint()
    with pytest.raises(MushroomError, match="not a saved stack fit"):
        StackFit.load(path)
    stale = model.model_copy(update={"features": model.features[:-1]})
    with pytest.raises(MushroomError, match="fit it again"):
        apply_stack(stale, members, "test", {"en": items})
    # a stack.json saved before the model kinds (a logistic model in coef/mean/scale) loads
    # and asks for a refit instead of failing as "not a stack"
    legacy = {k: v for k, v in model.model_dump(mode="json").items() if k != "scorer"}
    legacy.update(coef=[0.0], mean=[0.0], scale=[1.0], l2=1.0)
    with pytest.raises(MushroomError, match="fit it again"):
        apply_stack(StackModel.model_validate(legacy), members, "test", {"en": items})
    # a member run without the channels the stack was fitted with is refused, not zero-filled
    channel_file(tmp_path / "a" / "raw", "en").rename(tmp_path / "hidden.jsonl")
    with pytest.raises(MushroomError, match="channels hint, which this run of it lacks"):
        apply_stack(model, members, "test", {"en": items})
    (tmp_path / "hidden.jsonl").rename(channel_file(tmp_path / "a" / "raw", "en"))
    write_member(
        tmp_path / "b" / "predictions", items, lambda it: rng.uniform(0, 1, len(it.model_output_text))
    )
    assert stack_fingerprint(members, {"en": items}, folds=4) != fit.fingerprint()


def test_a_member_with_channels_in_some_languages_applies_to_any_set_of_them(tmp_path):
    """The semantic member writes channels for English only: de alone must not 'lack' them."""
    rng = np.random.default_rng(3)
    data = {
        "en": make_items(40, rng),
        "de": [it.model_copy(update={"id": "d" + it.id, "lang": "de"}) for it in make_items(40, rng)],
    }
    for split in ("val", "test"):
        for lang, items in data.items():
            write_member(tmp_path / "lex", items, gold_vec, split, channel=gold_vec, lang=lang)
            hint = gold_vec if lang == "en" else None
            write_member(
                tmp_path / "sem", items, lambda it: gold_vec(it) * 0.8, split, channel=hint, lang=lang
            )
    members = parse_members([f"lex={tmp_path / 'lex'}", f"sem={tmp_path / 'sem'}"])
    model = fit_stack(members, data, folds=4).model
    assert model.channels_by_lang == {
        "lex": {"en": ["hint"], "de": ["hint"]},
        "sem": {"en": ["hint"], "de": []},
    }
    assert [p.id for p in apply_stack(model, members, "test", {"de": data["de"]})["de"]] == [
        it.id for it in data["de"]
    ]
    # a language the stack never saw is owed the channels every fitted language had (lex's);
    # a run that writes channels (it has them for other languages) but none for fi: said, and
    # zeros there, as for items without contexts in the fit, alone or beside other languages
    fi = [it.model_copy(update={"id": "f" + it.id, "lang": "fi"}) for it in data["de"][:5]]
    write_member(tmp_path / "sem", fi, gold_vec, "test", lang="fi")
    write_member(tmp_path / "lex", fi, gold_vec, "test", lang="fi")
    for langs in ({"fi": fi}, {"de": data["de"], "fi": fi}):
        told = []
        assert len(apply_stack(model, members, "test", langs, warn=told.append)["fi"]) == 5
        assert len(told) == 1 and "member 'lex' has no channels hint for fi, which the stack" in told[0]
    # a stack fitted on English alone applies to German, whose run of sem lacks the English
    # encoder's channel by design: said, not refused (no re-run could give it)
    en_only = fit_stack(members, {"en": data["en"]}, folds=4).model
    told = []
    assert len(apply_stack(en_only, members, "test", {"de": data["de"]}, warn=told.append)["de"]) == 40
    assert told == [
        f"{tmp_path / 'sem'}: member 'sem' has no channels hint for de, which the stack "
        "was not fitted on; it was fitted with them on en, and sees zeros there (a stack fitted on such "
        "languages too learns what their absence means)"
    ]
    # a run without any channel file (channels off, an older version) is refused
    hidden = tmp_path / "hidden"
    (tmp_path / "lex" / "raw").rename(hidden)
    with pytest.raises(
        MushroomError, match=r"member 'lex', channels hint, which this run of it lacks \(language de, fi\)"
    ):
        apply_stack(model, members, "test", {"de": data["de"], "fi": fi})
    hidden.rename(tmp_path / "lex" / "raw")
    # English without the channels it was fitted with is still refused, and named
    channel_file(tmp_path / "sem" / "raw", "en").unlink()
    with pytest.raises(
        MushroomError, match=r"member 'sem', channels hint, which this run of it lacks \(language en\)"
    ):
        apply_stack(model, members, "test", {"en": data["en"], "de": data["de"]})


def test_a_run_whose_channel_carries_no_evidence_where_the_fit_had_some_is_said(tmp_path):
    """The lexical member writes its fact-check channels as zeros when no qa_* context was read:
    a corpus run without that file gave worse English predictions, and no word of it."""
    from mushroom.combine.stack.stream import iter_apply_stack

    rng = np.random.default_rng(5)
    items = make_items(40, rng)
    write_member(tmp_path / "lex", items, gold_vec, "val", channel=gold_vec)
    zeros = lambda it: np.zeros(len(it.model_output_text))  # noqa: E731
    write_member(tmp_path / "bare", items, gold_vec, "test", channel=zeros)
    members = parse_members([f"lex={tmp_path / 'lex'}"])
    model = fit_stack(members, {"en": items}, folds=4).model
    assert model.channel_use["lex"]["en"]["hint"] == pytest.approx(
        np.mean([bool(it.hard_labels) for it in items])
    )
    told: list[str] = []
    bare = parse_members([f"lex={tmp_path / 'bare'}"])
    apply_stack(model, bare, "test", {"en": items}, warn=told.append)
    assert told == [
        "member 'lex': channel hint is 0 on all 40 en items, where "
        f"{min(model.channel_use['lex']['en']['hint'], 1):.0%} or more of the en items the stack was fitted "
        "on had evidence in them: this run lacks evidence the fit had (a context source it read then?), "
        "and its predictions there are made without it"
    ]
    streamed: list[str] = []
    for _ in iter_apply_stack(model, bare, "test", {"en": items}, warn=streamed.append, chunk_items=7):
        pass
    assert streamed == told
    # the same channel with evidence on some items, or too few items to tell, says nothing
    write_member(tmp_path / "lex", items, gold_vec, "test")  # its channel file is val's, same ids
    quiet: list[str] = []
    apply_stack(model, members, "test", {"en": items}, warn=quiet.append)
    apply_stack(model, bare, "test", {"en": items[:19]}, warn=quiet.append)
    assert quiet == []


@pytest.mark.parametrize("kind", ["logistic", "trees"])
def test_each_model_kind_fits_and_is_saved_as_its_kind(tmp_path, kind):
    rng = np.random.default_rng(2)
    items = make_items(60, rng)
    write_member(tmp_path / "a", items, lambda it: np.clip(gold_vec(it) * 0.6 + 0.2, 0, 1))
    fit = fit_stack(parse_members([str(tmp_path / "a")]), {"en": items}, folds=3, model=kind)
    assert fit.model.scorer.kind == kind
    assert fit.comparison["stack (CV)"]["en"]["iou"] > 0.9
    back = StackModel.model_validate_json(fit.model.model_dump_json())
    feats = np.random.default_rng(0).uniform(0, 1, (50, len(fit.model.features)))
    assert np.array_equal(back.scorer(feats), fit.model.scorer(feats))
    with pytest.raises(MushroomError, match="choose blend, trees or logistic"):
        fit_stack(parse_members([str(tmp_path / "a")]), {"en": items}, folds=3, model="tree")


def test_hard_label_source_is_chosen_per_language_without_the_item():
    items = [
        Item(id=f"{lang}{k}", lang=lang, model_input="q", model_output_text="abc")
        for lang in ("de", "en")
        for k in range(10)
    ]
    # stack wins in de, member "m" in en; item 0 of en is an outlier favouring the stack
    ious = {
        "stack": np.array([0.8] * 10 + [0.9] + [0.2] * 9),
        "m": np.array([0.5] * 10 + [0.0] + [0.7] * 9),
    }
    pooled, per_lang = best_hard_sources(items, ious, range(20))
    assert per_lang == {"de": "stack", "en": "m"} and pooled == "m"
    chosen, per_fold = nested_hard_sources(items, ious, np.arange(20) % 5)
    assert len(per_fold) == 5
    assert chosen[:10] == ["stack"] * 10 and chosen[10:] == ["m"] * 10
    tie = {"stack": np.full(20, 0.5), "m": np.full(20, 0.5)}
    assert best_hard_sources(items, tie, range(20)) == ("stack", {"de": "stack", "en": "stack"})


def test_missing_member_file_names_the_path(tmp_path):
    items = make_items(5, np.random.default_rng(0))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MushroomError, match="no val prediction files"):
        fit_stack(parse_members([str(tmp_path / "empty")]), {"en": items})
    with pytest.raises(MushroomError, match="unique"):
        parse_members([f"x={tmp_path}", f"x={tmp_path}"])


def test_channels_round_trip(tmp_path):
    path = tmp_path / "c.jsonl"
    write_channels(path, {"a": {"w": np.array([0.0, 0.5, 0.5, 1.0])}})
    back = read_channels(path, {"a": 4, "unknown": 3})
    assert np.allclose(back["a"]["w"], [0.0, 0.5, 0.5, 1.0])


def test_stack_cli_fit_and_apply_on_val(tmp_path):
    """End to end on the shipped val data with two lexical variants as members."""
    runner = CliRunner()
    for name, threshold in (("lo", "0.2"), ("hi", "0.4")):
        res = runner.invoke(
            app,
            [
                "detect",
                "--split",
                "val",
                "--lang",
                "it",
                "--lang",
                "sv",
                "--out",
                str(tmp_path / name),
                "-o",
                f"threshold={threshold}",
                "--quiet",
            ],
        )
        assert res.exit_code == 0, res.output
    model = tmp_path / "stack.json"
    res = runner.invoke(
        app,
        [
            "stack",
            "fit",
            f"lo={tmp_path / 'lo'}",
            f"hi={tmp_path / 'hi'}",
            "--out",
            str(model),
            "--lang",
            "it",
            "--lang",
            "sv",
            "--folds",
            "3",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "hard labels from" in res.output
    saved = StackModel.model_validate_json(model.read_text())
    assert saved.members == ["lo", "hi"] and set(saved.cv) == {"it", "sv", "mean"}
    res = runner.invoke(
        app,
        [
            "stack",
            "apply",
            str(model),
            f"lo={tmp_path / 'lo'}",
            f"hi={tmp_path / 'hi'}",
            "--split",
            "val",
            "--lang",
            "it",
            "--lang",
            "sv",
            "--out",
            str(tmp_path / "applied"),
        ],
    )
    assert res.exit_code == 0, res.output
    preds = load_predictions(tmp_path / "applied" / submission_name("it", "val"))
    assert len(preds) == 50


def test_hard_labels_cover_whole_words_and_the_short_gaps_between_them():
    text = "Born in Paris, France -- in 1901."
    probs = np.zeros(len(text))
    probs[text.index("Paris") + 2] = 0.9  # one character of the word is enough
    probs[text.index("France")] = 0.6
    probs[text.index("1901") : text.index("1901") + 4] = 0.7
    mask = word_hard_mask(text, probs, 0.5)
    marked = "".join(ch if on else "_" for ch, on in zip(text, mask))
    # ", " (2 characters) is bridged; " -- in " is not (and "in" is below the threshold);
    # the final full stop is outside every word
    assert marked == "________Paris, France_______1901_"
    assert not word_hard_mask(text, probs, 0.95).any()
    assert word_hard_mask("", np.zeros(0), 0.5).shape == (0,)
    zh = "他出生于巴黎"
    zh_probs = np.array([0, 0, 0, 0, 0.8, 0.8])
    assert word_hard_mask(zh, zh_probs, 0.5).tolist() == [False] * 4 + [True] * 2


def test_logistic_prediction_equals_the_standardised_design():
    from mushroom.combine.stack.logistic import design, predict

    rng = np.random.default_rng(0)
    feats = rng.normal(loc=[1000.0, -3.0, 0.5], scale=[5.0, 1e-3, 1.0], size=(200, 3))
    coef, mean, scale = rng.normal(size=4), feats.mean(0), feats.std(0)
    expected = 1.0 / (1.0 + np.exp(-(design(feats, mean, scale) @ coef)))
    assert np.allclose(predict(coef, mean, scale, feats), expected, rtol=1e-9, atol=1e-12)
    assert predict(coef, mean, scale, np.zeros((0, 3))).shape == (0,)


def test_soft_labels_are_flat_over_words_and_gaps_take_the_lower_word():
    from mushroom.combine.stack.decoding import pool_words

    text = " Born in Paris, France.\n"
    probs = np.linspace(0.1, 0.9, len(text))
    pooled = pool_words(text, probs)
    by_char = dict(zip(range(len(text)), pooled))
    for word in ("Born", "in", "Paris", "France"):
        start = text.index(word)
        # every character of a word takes the word's highest probability
        assert {by_char[k] for k in range(start, start + len(word))} == {probs[start + len(word) - 1]}
    # ", " between Paris and France takes the lower of the two words
    gap = range(text.index(",", 0), text.index("France"))
    assert {by_char[k] for k in gap} == {by_char[text.index("Paris")]}
    # the leading space, the final full stop and newline are outside every word: 0
    assert pooled[0] == 0.0 and pooled[-2:].tolist() == [0.0, 0.0]
    # a gold vector drawn from spans over whole words passes through unchanged
    gold = np.zeros(len(text))
    gold[text.index("Paris") : text.index("France") + len("France")] = 0.5
    gold[text.index("Born") : text.index("Born") + 4] = 0.25
    assert pool_words(text, gold).tolist() == gold.tolist()
    assert pool_words("", np.zeros(0)).shape == (0,)
    assert pool_words("...", np.full(3, 0.4)).tolist() == [0.0] * 3  # no word: outside every word
    # Chinese: characters are words that touch (no gap); a full stop is a gap
    zh = "他出生于巴黎。他"
    zh_pooled = pool_words(zh, np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 0.7]))
    assert zh_pooled[:6].tolist() == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6] and zh_pooled[6] == 0.6
    # a newline between words is a gap like a space
    assert pool_words("a\n\nb", np.array([0.8, 0.9, 0.1, 0.3])).tolist() == [0.8, 0.3, 0.3, 0.3]


def test_cutoff_table_choice_matches_a_brute_force_search_and_shrinks_toward_pooled():
    from mushroom.combine.stack.decoding import FLOORS, THRESHOLDS, CutoffScores
    from mushroom.evaluation.metrics import mask_iou

    rng = np.random.default_rng(3)
    items = make_items(40, rng)
    items = [it.model_copy(update={"lang": "de" if k % 2 else "en"}) for k, it in enumerate(items)]
    probs = [
        np.clip(gold_vec(it) * rng.uniform(0.2, 0.9) + rng.uniform(0, 0.5, len(gold_vec(it))), 0, 1)
        for it in items
    ]
    table = CutoffScores.build(items, probs)

    def brute(idx):
        def iou(t):
            return np.mean(
                [
                    mask_iou(
                        gold_vec(items[k]) > 0,
                        word_hard_mask(items[k].model_output_text, np.round(probs[k], 6), t),
                    )
                    for k in idx
                ]
            )

        return max(THRESHOLDS, key=iou)

    en = [k for k in range(40) if items[k].lang == "en"]
    assert table.choose(en)[0] == brute(en)
    assert table.choose(range(40))[0] == brute(range(40))
    assert table.choose(en)[1] in FLOORS
    # an enormous shrinkage weight makes every language take the pooled cut-offs
    pooled, per_lang = table.choose_by_lang(range(40), shrink=1e9)
    assert set(per_lang.values()) == {pooled}


def test_fitting_needs_two_folds_and_a_penalty_of_at_least_zero():
    # The CLI's option bounds stop these too; the library says it before reading any file
    # (it failed with "need at least one array to concatenate" or a ZeroDivisionError).
    from mushroom.combine.stack import fit_stack

    for folds, l2 in ((1, 1.0), (0, 1.0), (5, -1.0)):
        with pytest.raises(MushroomError, match="folds >= 2 and l2 >= 0"):
            fit_stack([], {}, folds=folds, l2=l2)


def test_more_folds_than_items_of_a_language_is_refused():
    items = make_items(6, np.random.default_rng(0))
    with pytest.raises(MushroomError, match="--folds 8: no language has more than 6 items; use --folds 6"):
        fit_stack([], {"en": items}, folds=8)


def test_member_runs_with_failed_items_or_of_a_run_config_are_read_right(tmp_path):
    rng = np.random.default_rng(3)
    items = make_items(12, rng)
    write_member(tmp_path / "a", items, gold_vec)
    # a run config keeps test files in test/: found there, as val/ is
    write_member(tmp_path / "a" / "test", items, gold_vec, split="test")
    assert Member("a", tmp_path / "a").folder("test") == tmp_path / "a" / "test"
    # items that failed and were written empty by --allow-failures are no evidence
    write_lines(
        tmp_path / "a" / "failures.jsonl", [{"split": "val", "lang": "en", "id": items[0].id, "error": "x"}]
    )
    with pytest.raises(
        MushroomError, match=r"1 of its items is listed as failed in its run .*\(--allow-failures writes"
    ):
        fit_stack([Member("a", tmp_path / "a")], {"en": items}, folds=3)
    (tmp_path / "a" / "failures.jsonl").write_text("")  # the re-run completed them
    assert fit_stack([Member("a", tmp_path / "a")], {"en": items}, folds=3).model.members == ["a"]
    # a run config's variant: its own item ledger says which of its items failed (the run's
    # failures.jsonl does not name the variant); the last line per id wins
    variant = tmp_path / "cfg" / "v1"
    write_member(variant / "val", items, gold_vec)
    ledger = variant / "val" / "items" / "en.jsonl"
    ledger.parent.mkdir()
    write_lines(ledger, [{"id": items[1].id, "status": "failed"}])
    with pytest.raises(
        MushroomError,
        match=r"member 'v1': .*1 of its items is listed as failed in its run \(.*items/en.jsonl\)",
    ):
        fit_stack([Member("v1", variant)], {"en": items}, folds=3)
    write_lines(ledger, [{"id": items[1].id, "status": "failed"}, {"id": items[1].id, "status": "ok"}])
    assert fit_stack([Member("v1", variant)], {"en": items}, folds=3).model.members == ["v1"]


def test_a_run_of_another_detector_given_for_a_member_is_refused(tmp_path):
    rng = np.random.default_rng(4)
    items = make_items(12, rng)
    for name, detector in (("a", "lexical"), ("b", "semantic")):
        write_member(tmp_path / name, items, gold_vec)
        write_member(tmp_path / name, items, gold_vec, split="test")
        config = {"config": {"job": "detect", "detector": detector}, "config_hash": "x"}
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    fit = fit_stack([Member("m", tmp_path / "a")], {"en": items}, folds=3)
    assert fit.model.member_detectors == {"m": "lexical"}
    assert apply_stack(fit.model, [Member("m", tmp_path / "a")], "test", {"en": items})["en"]
    with pytest.raises(
        MushroomError, match="member 'm' was fitted on a run of the 'lexical' detector; .* 'semantic'"
    ):
        apply_stack(fit.model, [Member("m", tmp_path / "b")], "test", {"en": items})


def _middling(it, rng):
    """Probabilities as unsure (0.5-0.8) of the wrong word as of 3 words of a long gold-empty answer."""
    vec = np.zeros(len(it.model_output_text))
    spans = word_spans(it.model_output_text)
    for s, e in spans:
        vec[s:e] = rng.uniform(0.0, 0.2)
    marked = [tuple(h) for h in it.hard_labels] or [
        spans[k] for k in rng.choice(len(spans), 3, replace=False)
    ]
    for s, e in marked:
        vec[s:e] = rng.uniform(0.5, 0.8)
    return vec


def word_spans(text):
    import re

    return [m.span() for m in re.finditer(r"\S+", text)]


def test_the_empty_rule_marks_nothing_where_nothing_pays_and_keeps_the_soft_labels(tmp_path):
    """IoU gives a gold-empty item 1 only when nothing is marked: a stack marking a little there scored 0.

    The stack's out-of-fold probabilities are set to look alike word by word in both kinds of
    item, so that only the item (its length) tells them apart, as the rule sees it.
    """
    from mushroom.combine.stack import StackConfig
    from mushroom.combine.stack.decoding import CutoffScores
    from mushroom.combine.stack.empty import EmptyRule
    from mushroom.combine.stack.features import load_stack_data
    from mushroom.combine.stack.fit import choose, prepare

    rng = np.random.default_rng(5)
    items = make_items(80, rng, empty_words=30)  # every fourth a long answer whose gold is empty
    write_member(tmp_path / "a", items, lambda it: gold_vec(it) * 0.4)  # marks nothing itself
    members = parse_members([f"a={tmp_path / 'a'}"])
    data, channels, _ = load_stack_data(members, "val", {"en": items}, None, ["en"])
    prep = prepare(data, channels, ["a"], folds=4)
    prep.oof = [_middling(it, rng) for it in items]
    prep.scores = CutoffScores.build(items, prep.oof)
    on, off = choose(prep), choose(prep, StackConfig(empty_rule=False))
    assert off.model.empty_rule is None and on.model.empty_rule is not None
    # out of fold: each fold's rule, fitted on the others, empties the long gold-empty answers
    assert off.comparison["stack (CV)"]["en"]["iou"] < 0.8 < 0.95 < on.comparison["stack (CV)"]["en"]["iou"]
    assert sum(sum(f["emptied"].values()) for f in on.folds) == 20  # the 20 long ones
    assert on.comparison["stack (CV)"]["en"]["cor"] == off.comparison["stack (CV)"]["en"]["cor"]
    # applied: a rule that empties long answers empties their hard labels and keeps the soft ones
    long_only = EmptyRule(coef=[0.0, 50.0, 0.0, 0.0], mean=[4.0, 0.0, 0.0], scale=[0.1, 1.0, 1.0])
    write_member(tmp_path / "a", items, lambda it: gold_vec(it) * 0.4, split="test")
    model = on.model.model_copy(update={"empty_rule": long_only})
    with_rule = apply_stack(model, members, "test", {"en": items})["en"]
    without = apply_stack(model.model_copy(update={"empty_rule": None}), members, "test", {"en": items})["en"]
    assert [not p.hard_labels for p in with_rule] == [k % 4 == 0 for k in range(80)]
    assert [p.hard_labels for p in with_rule[1:4]] == [p.hard_labels for p in without[1:4]] != [[]] * 3
    assert [p.soft_labels for p in with_rule] == [p.soft_labels for p in without]
    # a stack.json saved before the rule loads as a stack without one
    saved = on.model.model_dump(mode="json")
    del saved["empty_rule"]
    assert StackModel.model_validate(saved).empty_rule is None


def test_the_empty_rule_of_each_fold_is_fitted_without_that_fold():
    from mushroom.combine.stack.empty import fit_empty_rule, nested_empties

    rng = np.random.default_rng(0)
    feats = rng.normal(size=(60, 3))
    gain = np.where(feats[:, 0] > 0.5, 1.0, -0.5)
    fold_of = np.arange(60) % 3
    nested = nested_empties(feats, gain, fold_of)
    for f in range(3):
        rule = fit_empty_rule(feats[fold_of != f], gain[fold_of != f])
        assert (nested[fold_of == f] == (rule.probability(feats[fold_of == f]) > 0.5)).all()
    gain_flipped = gain.copy()
    gain_flipped[fold_of == 0] *= -1  # the fold's own gains do not move its decisions
    assert (nested_empties(feats, gain_flipped, fold_of)[fold_of == 0] == nested[fold_of == 0]).all()
    assert nested[feats[:, 0] > 1].all() and not nested[feats[:, 0] < 0].any()


def test_a_stack_fitted_without_language_columns_says_so_in_its_model(tmp_path):
    """`benchmarks/stack_lolo.py --language-columns off` stopped on "49 features, the stack 67"."""
    from mushroom.combine.stack.features import load_stack_data
    from mushroom.combine.stack.fit import fit_stack_data

    rng = np.random.default_rng(3)
    items = make_items(40, rng)
    write_member(tmp_path / "a", items, lambda it: gold_vec(it) * 0.6)
    members = parse_members([f"a={tmp_path / 'a'}"])
    data, channels, _ = load_stack_data(members, "val", {"en": items}, None, [])
    model = fit_stack_data(data, channels, ["a"], folds=4, language_columns=False).model
    assert model.languages == [] and len(model.features) == data.features[0].shape[1]


def test_a_language_the_stack_never_saw_takes_the_hard_labels_of_the_stack_without_language_columns(tmp_path):
    """Held out in turn, val languages were marked better by a stack fitted without language
    columns and ranked worse (benchmarks/stack_lolo.py --compare): an unseen language takes
    that stack's hard labels and the first stack's soft labels; a seen one is untouched."""
    rng = np.random.default_rng(5)
    data = {
        "en": make_items(40, rng),
        "de": [it.model_copy(update={"id": "d" + it.id, "lang": "de"}) for it in make_items(40, rng)],
    }
    fi = [it.model_copy(update={"id": "f" + it.id, "lang": "fi"}) for it in make_items(20, rng)]
    for split, langs in (("val", data), ("test", {**data, "fi": fi})):
        for lang, items in langs.items():
            write_member(
                tmp_path / "lex",
                items,
                lambda it: gold_vec(it) * 0.7 + rng.uniform(0, 0.4, len(it.model_output_text)),
                split,
                lang=lang,
            )
    members = parse_members([f"lex={tmp_path / 'lex'}"])
    model = fit_stack(members, data, folds=4).model
    assert (
        model.unseen_hard is not None
        and model.unseen_hard.languages == []
        and model.languages == ["de", "en"]
    )
    assert not any(f.startswith("lang=") for f in model.unseen_hard.features)
    test = {"de": data["de"], "fi": fi}
    both = apply_stack(model, members, "test", test)
    alone = apply_stack(model.model_copy(update={"unseen_hard": None}), members, "test", test)
    agnostic = apply_stack(model.unseen_hard, members, "test", test)
    assert [p.soft_labels for p in both["fi"]] == [p.soft_labels for p in alone["fi"]]
    assert [p.hard_labels for p in both["fi"]] == [p.hard_labels for p in agnostic["fi"]]
    assert [p.model_dump() for p in both["de"]] == [p.model_dump() for p in alone["de"]]
    # saved and read back, it applies the same; a stack saved before it had none: as before
    again = StackModel.model_validate_json(model.model_dump_json())
    assert [p.hard_labels for p in apply_stack(again, members, "test", test)["fi"]] == [
        p.hard_labels for p in both["fi"]
    ]
    older = json.loads(model.model_dump_json())
    del older["unseen_hard"]
    assert [
        p.hard_labels for p in apply_stack(StackModel.model_validate(older), members, "test", test)["fi"]
    ] == [p.hard_labels for p in alone["fi"]]
    assert fit_stack(members, data, folds=4, config=StackConfig(unseen_hard=False)).model.unseen_hard is None
    # a hand edit that would make it read the wrong columns is refused, naming the key
    for edit in ({"languages": ["fi"]}, {"members": ["other"]}):
        bad = json.loads(model.model_dump_json())
        bad["unseen_hard"].update(edit)
        with pytest.raises(ValueError, match="unseen_hard: the second stack must have the same members"):
            StackModel.model_validate(bad)
    # this stack's floor may zero a character the other marks: it keeps a probability (a review:
    # "character N is in a hard span but has soft probability 0" stopped the stack's files)
    floored = apply_stack(model.model_copy(update={"floor": 0.999}), members, "test", {"fi": fi})["fi"]
    assert any(p.hard_labels for p in floored)
    for p, it in zip(floored, fi):
        vec = soft_to_vector(p.soft_labels, len(it.model_output_text))
        assert all(vec[s:e].min() > 0 for s, e in p.hard_labels), p


def test_the_second_stack_fitted_beside_the_first_raises_its_error_in_the_caller():
    """Fitted on a thread, a failure of the second stack must not pass for a stack without it."""
    from mushroom.combine.stack.fit import _Background

    job = _Background(lambda a, b: a / b, 1, 0)
    with pytest.raises(ZeroDivisionError):
        job.result()
    assert _Background(lambda a, b: a + b, 1, 2).result() == 3
    assert job._thread.daemon  # a Ctrl-C during the fit is not held up until it ends
