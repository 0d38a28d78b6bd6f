"""The one-call library API as a notebook user meets it: bad input, warnings, caches, failures."""

import json
import time
import warnings

import pytest
from fake_openai_server import FakeServer

import mushroom

ANSWER = "Paris is the capital of Italy."
CONTEXT = "Paris is the capital of France."


def llm_backend(url: str) -> dict:
    return {"kind": "openai", "base_url": url, "model": "m", "max_retries": 0}


def test_malformed_items_are_type_errors_that_say_what_an_item_is():
    cases = [
        (lambda: mushroom.detect_batch({"answer": ANSWER}), "a list of items"),
        (lambda: mushroom.detect_batch([ANSWER]), "takes dicts with 'answer'"),
        (
            lambda: mushroom.detect_batch([{"answer": ANSWER, "context": [CONTEXT]}]),
            "did you mean 'contexts'",
        ),
        (lambda: mushroom.detect_batch([{"answer": ANSWER, "id": ""}]), "id must be a non-empty string"),
        (  # it ran as English, the language key ignored
            lambda: mushroom.detect_batch([{"answer": ANSWER, "language": "de"}]),
            "unknown key 'language' \\(did you mean 'lang'\\?\\)",
        ),
        # misspelt, the key ran as English too: near a synonym, or its letters swapped
        *[
            (
                lambda key=key: mushroom.detect_batch([{"answer": ANSWER, key: "de"}]),
                f"unknown key '{key}' \\(did you mean 'lang'\\?\\)",
            )
            for key in ("langauge", "languge", "lnag", "lagn")
        ],
        (lambda: mushroom.detect(ANSWER, CONTEXT, question=["Italy"]), "question must be a string"),
        (lambda: mushroom.detect(ANSWER, CONTEXT, lang=None), "lang must be a language code"),
        (lambda: mushroom.detect(ANSWER, CONTEXT, method=None), "method must be a detector name"),
        # a context's text or source of the wrong kind, named by key, as every other wrong kind
        (
            lambda: mushroom.detect(ANSWER, {"source": 5, "text": "x"}),
            "item 0: contexts\\[0\\]\\['source'\\] is of type int, not a string",
        ),
        (
            lambda: mushroom.detect(ANSWER, [{"text": None}]),
            "contexts\\[0\\]\\['text'\\] is of type NoneType",
        ),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()
    # a value no item can hold is a ValueError with its place, not pydantic's own error
    for call, message in (
        (
            lambda: mushroom.detect("Marie \ud83d Curie.", CONTEXT),
            "item 0: model_output_text: character 6 is",
        ),
        (
            lambda: mushroom.detect(ANSWER, [CONTEXT, "x\udc00"]),
            "item 0: contexts\\[1\\].text: character 1 is",
        ),
        (
            lambda: mushroom.detect_batch([{"answer": ANSWER, "lang": "../x"}]),
            "item 0: lang: a language code",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    # keys of a record's own that only start like an item key are left alone, as before
    extra = {"answer": ANSWER, "contexts": CONTEXT, "answer_tokens": [1, 2], "identifier": "x1"}
    assert len(mushroom.detect_batch([extra])) == 1
    # nor a dataset's columns near a synonym ("prompt", "passages"), or near a key given too
    columns = {"prompt_id": 3, "response_id": 4, "evidence_id": 5, "passage": "p", "languages": ["en"]}
    assert len(mushroom.detect_batch([{**extra, "lang": "en", **columns}])) == 1
    # None is "no question", not the question "None"
    assert (
        mushroom.detect(ANSWER, CONTEXT, question=None).hard_labels
        == mushroom.detect(ANSWER, CONTEXT).hard_labels
    )


def test_what_the_command_line_warns_of_is_warned_of_here_too():
    with pytest.warns(RuntimeWarning, match="1 of 1 items have no contexts that can support an answer"):
        assert mushroom.detect(ANSWER).hard_labels == []
    for blank in ("", "   "):  # an empty text supports nothing either: it was taken in silence
        with pytest.warns(RuntimeWarning, match="1 of 1 items have no contexts that can support"):
            mushroom.detect(ANSWER, blank)
    with pytest.warns(RuntimeWarning, match="language 'xx' is not one mushroom knows"):
        mushroom.detect(ANSWER, CONTEXT, lang="xx")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mushroom.detect(ANSWER, CONTEXT)  # nothing to say
    # unusable model output: no "nothing wrong", a failed item, and said
    with FakeServer({}, default_text="lorem ipsum") as server:
        with pytest.warns(RuntimeWarning, match="1 of 1 LLM responses were unparseable"):
            with pytest.raises(mushroom.RunFailed, match="could not be read as spans"):
                mushroom.detect(ANSWER, CONTEXT, method="llm", backend=llm_backend(server.url))
    # output read in part: a run's counts table shows it; here an entry dropped was unsaid (a review)
    partly = '[{"text": "Italy"}, {"txt": "capital"}, {"text": "Paris", "probability": 7}]'
    with FakeServer({}, default_text=partly) as server:
        with pytest.warns(
            RuntimeWarning, match=r"llm \(en\): part of the model's output .*llm.invalid_entries 1, "
        ):
            pred = mushroom.detect(ANSWER, CONTEXT, method="llm", backend=llm_backend(server.url))
    assert {ANSWER[s:e] for s, e in pred.hard_labels} == {"Italy", "Paris"}


def test_no_response_cache_is_left_behind_and_a_second_server_is_asked(tmp_path, monkeypatch):
    # a cache in the current folder answered a later call to another server with the first's answer
    monkeypatch.chdir(tmp_path)
    one = '{"incorrect_spans": [{"text": "Italy", "probability": 0.9}]}'
    with FakeServer({}, default_text=one) as first, FakeServer({}) as second:
        assert mushroom.detect(ANSWER, CONTEXT, method="llm", backend=llm_backend(first.url)).spans
        assert mushroom.detect(ANSWER, CONTEXT, method="llm", backend=llm_backend(second.url)).spans == []
        assert len(second.calls) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_zero_weight_for_every_source_is_no_support_not_a_division_by_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pred = mushroom.detect(ANSWER, CONTEXT, source_weights={"context0": 0.0})
    assert pred.hard_labels == []


def test_source_weights_count_by_their_ratios_however_large():
    """9e307 each overflowed the weighted sums: every probability 0, with numpy's warning alone
    (an audit); their ratio is that of 1 each."""
    answer = "Marie Curie was born in 1867 in Berlin."
    contexts = ["Marie Curie was born in Warsaw in 1867.", "Berlin is a city."]
    huge = {"context0": 9e307, "context1": 9e307}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = mushroom.detect(answer, contexts, method="lexical", source_weights=huge)
    same = mushroom.detect(answer, contexts, method="lexical", source_weights={"context0": 1, "context1": 1})
    assert got.hard_labels == same.hard_labels != [] and got.probs == same.probs
    # unequal weights predict as before the scaling (0.523, as mushroom at 119249a): divided by
    # their largest, the shares moved across the 1/3 and 2/3 limits by a last bit (a review)
    three = [
        "Marie Curie was born in Berlin in 1867.",
        "Marie Curie was born in 1867.",
        "Curie Berlin born 1867 Marie.",
    ]
    pred = mushroom.detect(
        answer, three, method="lexical", source_weights={"context0": 0.2, "context1": 0.3, "context2": 0.4}
    )
    assert [(answer[s.start : s.end], round(s.prob, 4)) for s in pred.soft_labels] == [("Berlin", 0.523)]


def test_the_lazy_names_are_listed_for_tab_completion():
    assert {"detect", "detect_batch", "detect_stream", "Prediction", "RunFailed"} <= set(dir(mushroom))


class OnePass:
    """Items made as they are read: read once, never more than a chunk ahead of the consumer."""

    def __init__(self, n: int, chunk: int):
        self.n, self.chunk = n, chunk
        self.read = 0
        self.received = 0  # predictions the consumer has taken so far
        self.iterated = False

    def __iter__(self):
        assert not self.iterated, "the items were read twice"
        self.iterated = True
        for k in range(self.n):
            ahead = k - self.received
            assert ahead < self.chunk, f"item {k} read with {self.received} predictions taken"
            self.read += 1
            # no id: a stream's chunks must still name them apart
            yield {"answer": f"Paris is the capital of Italy ({k}).", "contexts": [CONTEXT]}


def test_detect_stream_reads_an_iterable_once_a_chunk_at_a_time_and_matches_detect_batch():
    source = OnePass(10, chunk=4)
    stream = mushroom.detect_stream(source, method="lexical", chunk_size=4)
    assert source.read == 0  # nothing is read before the first prediction is asked for
    got = []
    for pred in stream:
        got.append(pred)
        source.received += 1
        assert source.read <= 4 * (-(-source.received // 4))  # the chunk of this one, no further
    whole = mushroom.detect_batch(list(OnePass(10, chunk=10)), method="lexical")
    assert [p.id for p in got] == [p.id for p in whole] == [f"item-{k}" for k in range(10)]
    assert [p.model_dump() for p in got] == [p.model_dump() for p in whole]
    assert got[3].spans[-1][2].startswith("Italy")
    with pytest.raises(ValueError, match=r"'x' is the id of item 0 and of item 1$"):
        list(mushroom.detect_stream([{"id": "x", "answer": ANSWER, "contexts": CONTEXT}] * 2, chunk_size=1))
    # said before the later chunk is detected (it ran, with its warnings, first), of a made id too
    made = [{"answer": ANSWER, "contexts": CONTEXT}, {"id": "item-0", "answer": ANSWER, "contexts": CONTEXT}]
    stream = mushroom.detect_stream(made, chunk_size=1)
    assert next(stream).id == "item-0"
    with pytest.raises(ValueError, match=r"item 0 \(made for it: it gives no id\) and of item 1"):
        next(stream)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        mushroom.detect_stream([], chunk_size=0)


def test_records_of_the_data_files_and_a_dataframes_values_are_items():
    import json

    from conftest import VAL_EN

    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()[:2]]  # annotations, labels, ...
    for row in rows:
        row["contexts"] = [row["model_input"]]
    assert len(mushroom.detect_batch(rows)) == 2
    numpy = pytest.importorskip("numpy")
    pred = mushroom.detect_batch(
        [{"id": numpy.int64(3), "answer": ANSWER, "contexts": CONTEXT, "question": numpy.nan}]
    )
    assert pred[0].id == "3"


def test_a_warning_points_at_the_users_line():
    with pytest.warns(RuntimeWarning) as caught:
        mushroom.detect(ANSWER)
        mushroom.detect_batch([{"answer": ANSWER}])
    assert [w.filename for w in caught] == [__file__, __file__]


def test_a_failed_item_keeps_the_others_in_the_exception():
    # one failed call threw a whole batch away
    script = {"item two": [("status", 400)]}
    with FakeServer(script) as server:
        items = [
            {"id": "one", "answer": ANSWER, "contexts": CONTEXT, "question": "item one"},
            {"id": "two", "answer": ANSWER, "contexts": CONTEXT, "question": "item two"},
            {"id": "three", "answer": ANSWER, "contexts": CONTEXT, "question": "item three", "lang": "de"},
        ]
        failed = pytest.raises(mushroom.RunFailed, match="1 of 3 items failed .first: two: HTTP 400")
        with warnings.catch_warnings(record=True) as seen, failed as caught:
            warnings.simplefilter("always")
            mushroom.detect_batch(items, method="llm", backend=llm_backend(server.url))
    assert sorted(caught.value.predictions) == ["one", "three"] and list(caught.value.errors) == ["two"]
    # the failure is the exception; no warning says the failed item's prediction is "empty"
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning) and "failed" in str(w.message)]
    assert caught.value.predictions["one"].probs == [0.0] * len(ANSWER)  # with its text, as returned


def test_a_detector_failing_whole_languages_keeps_what_other_languages_gave(monkeypatch):
    import numpy as np

    import mushroom.detectors as registry
    from mushroom.data.predictions import prediction_from_vectors
    from mushroom.detectors import Detector, register_detector
    from mushroom.detectors.base import DetectorOptions, ItemResult
    from mushroom.errors import MushroomError

    monkeypatch.setattr(registry.DETECTORS, "registered", dict(registry.DETECTORS.registered))

    class ByLanguageOptions(DetectorOptions):
        fail_de: str = "runfailed"

    @register_detector("by-language-test")
    class ByLanguage(Detector):
        Options = ByLanguageOptions

        def run(self, items, contexts, emit):
            if items[0].lang == "de":  # fails the language as a whole, naming no item
                if self.options.fail_de == "runfailed":
                    raise mushroom.RunFailed("the German model is down")
                raise MushroomError("the German model could not be loaded")
            for it in items:
                vec = np.zeros(len(it.model_output_text))
                emit(ItemResult.ok(prediction_from_vectors(it.id, vec, vec > 0.5)))

    items = [{"id": "e", "answer": ANSWER}, {"id": "d", "answer": ANSWER, "lang": "de"}]
    for fail, message in (("runfailed", "the German model is down"), ("load", "could not be loaded")):
        with pytest.raises(mushroom.RunFailed) as caught:
            mushroom.detect_batch(items, method="by-language-test", fail_de=fail)
        assert list(caught.value.predictions) == ["e"] and message in caught.value.errors["d"]


def test_a_detector_dropped_from_the_kept_few_closes_its_connections(monkeypatch):
    """Each eviction left an httpx connection pool open for the life of the notebook."""
    from mushroom import api
    from mushroom.backends.openai_compat import OpenAIBackend

    monkeypatch.setattr(api._KEPT.holder, "detectors", {})
    closed = []
    monkeypatch.setattr(OpenAIBackend, "close", lambda self: closed.append(self.base_url))
    with FakeServer({}) as server:
        mushroom.detect(ANSWER, CONTEXT, method="llm", backend=llm_backend(server.url))
        for k in range(api._KEEP):  # eight other detectors push the first one out
            mushroom.detect(ANSWER, CONTEXT, method="lexical", threshold=0.1 + k / 100)
    assert closed == [server.url]


def test_mistakes_a_notebook_user_makes_are_said_at_the_call():
    """Each of these was silent, or came only at a stream's first next()."""
    with pytest.raises(mushroom.MushroomError, match="unknown detector 'nope'"):
        mushroom.detect_stream([{"answer": ANSWER}], method="nope")
    with pytest.raises(mushroom.MushroomError, match="threshhold"):
        mushroom.detect_stream([{"answer": ANSWER}], threshhold=0.3)
    with pytest.warns(RuntimeWarning, match="source_weights: 'wiki' names no context of these items"):
        mushroom.detect(ANSWER, CONTEXT, source_weights={"wiki": 2.0})
    # a stream's chunk that lacks a second context is no mistake: the next chunk has one
    rows = [{"answer": ANSWER, "contexts": [CONTEXT]}, {"answer": ANSWER, "contexts": [CONTEXT, CONTEXT]}]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        preds = list(mushroom.detect_stream(rows, chunk_size=1, source_weights={"context1": 2.0}))
    assert len(preds) == 2 and len([w for w in said if "source_weights" in str(w.message)]) == 1
    with pytest.raises(ValueError, match="'answer' and 'model_output_text' differ"):
        mushroom.detect_batch([{"answer": ANSWER, "model_output_text": CONTEXT}])
    # the question changes the spans: two that differ were read from `question` alone
    with pytest.raises(ValueError, match="item 0: 'question' and 'model_input' differ"):
        mushroom.detect_batch([{"answer": ANSWER, "question": "Where?", "model_input": "When?"}])
    with pytest.raises(TypeError, match=r"item 1 \(id 'x1'\): answer must be a string, not int"):
        mushroom.detect_batch([{"answer": ANSWER}, {"id": "x1", "answer": 7}])  # "item 1" alone
    with pytest.raises(TypeError, match="item 0: model_input must be a string"):  # it said "question"
        mushroom.detect_batch([{"answer": ANSWER, "model_input": 3}])
    with pytest.raises(TypeError, match="item 0: answer must be a string, not int"):  # not "differ"
        mushroom.detect_batch([{"answer": 5, "model_output_text": ANSWER}])
    # a datasets row: both columns, None in the one not used
    both = {"answer": None, "model_output_text": ANSWER, "question": "Where?", "model_input": None}
    assert mushroom.detect_batch([both]) == mushroom.detect_batch([{"answer": ANSWER, "question": "Where?"}])
    with pytest.raises(TypeError, match="needs an 'answer' string \\(its keys: 'text'\\)"):
        mushroom.detect_batch([{"text": ANSWER}])
    with pytest.raises(TypeError, match="item 0: answer must be a string, not NoneType"):
        mushroom.detect(None)  # it said "needs an 'answer' string (its keys: 'id', 'answer', ...)"
    # a regional tag is its language: German stopwords, not a warning about 'de-at'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        regional = mushroom.detect_batch(
            [{"answer": "Die Stadt liegt in Bayern.", "contexts": "Sie liegt in Tirol.", "lang": "de-AT"}]
        )
    plain = mushroom.detect_batch(
        [{"answer": "Die Stadt liegt in Bayern.", "contexts": "Sie liegt in Tirol.", "lang": "de"}]
    )
    assert regional[0].hard_labels == plain[0].hard_labels and plain[0].hard_labels
    # a language's English name is said with its code, as the command line says it
    with pytest.warns(RuntimeWarning, match="language 'german' \\(German is 'de'\\) is not one"):
        mushroom.detect("Die Stadt liegt in Bayern.", "Sie liegt in Tirol.", lang="German")


def test_true_or_nan_for_a_number_option_is_refused_not_read_as_one():
    """`threshold=True` was read as 1 and flagged nothing; NaN was said to be above 1."""
    with pytest.raises(mushroom.MushroomError, match="threshold: give a number, not true"):
        mushroom.detect(ANSWER, CONTEXT, threshold=True)
    with pytest.raises(mushroom.MushroomError, match="threshold.*finite number"):
        mushroom.detect(ANSWER, CONTEXT, threshold=float("nan"))
    assert mushroom.detect(ANSWER, CONTEXT, channels=False).hard_labels  # a true/false option still takes one


@pytest.mark.parametrize(
    ("key", "meant"),
    [("Lang", "lang"), ("LANG", "lang"), ("ID", "id"), ("query", "question"), ("passages", "contexts")],
)
def test_a_key_in_another_case_or_another_datasets_word_is_named(key, meant):
    """ "Lang" ran the item as English and "query" asked nothing: keys a case apart, or another
    dataset's word for a column, were ignored without a word."""
    with pytest.raises(TypeError, match=f"unknown key '{key}' \\(did you mean '{meant}'\\?\\)"):
        mushroom.detect_batch([{"answer": ANSWER, key: "de"}])


def test_a_datasets_row_with_none_for_lang_or_id_takes_the_defaults():
    """A datasets row has every column, None where its record lacked one: refused as a TypeError,
    though the keys are optional."""
    [pred] = mushroom.detect_batch([{"answer": ANSWER, "contexts": [CONTEXT], "lang": None, "id": None}])
    assert pred.id == "item-0" and pred.hard_labels  # run, as English: "Italy" is not in the context


@pytest.mark.parametrize("method", ["llm", "chain"])
def test_an_empty_answer_costs_no_model_call(method):
    """It sent a request per temperature (a chain, its stages) for an answer with no character
    a span could mark, and warned "claimed spans were not found"."""
    with FakeServer({}, default_text='{"incorrect_spans": []}') as server:
        preds = mushroom.detect_batch(
            [{"answer": "  ", "contexts": [CONTEXT]}, {"answer": "", "contexts": [CONTEXT]}],
            method=method,
            backend=llm_backend(server.url),
        )
        assert not server.calls
    assert [(p.hard_labels, p.soft_labels) for p in preds] == [([], []), ([], [])]


@pytest.mark.parametrize(
    ("call", "key", "meant"),
    [
        (mushroom.detect, "context", "contexts"),
        (mushroom.detect, "language", "lang"),
        (mushroom.detect, "detector", "method"),
        (mushroom.detect_batch, "Lang", "lang"),
    ],
)
def test_an_argument_under_another_name_is_named_not_called_an_unknown_option(call, key, meant):
    """`detect(answer, context=...)` said "detector lexical: field 'context': unknown option" and
    listed the lexical options, none of which the user meant."""
    first = ANSWER if call is mushroom.detect else [{"answer": ANSWER}]
    with pytest.raises(
        TypeError, match=f"unexpected keyword argument '{key}' \\(did you mean {meant}=\\?\\)"
    ):
        call(first, **{key: "x"})
    # an option of the detector of that name is an option: the llm detector's prompt
    with pytest.raises(mushroom.MushroomError, match="prompt 'nope' not found"):
        mushroom.detect(ANSWER, contexts=CONTEXT, method="llm", prompt="nope")


def test_a_prediction_keeps_its_spans_inside_its_text():
    """`Prediction` is exported: spans past its text, or reversed, made files `check` refuses."""
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match=r"soft_labels.0: \[0, 99\) is not inside the text \(3 characters\)"
    ):
        mushroom.Prediction(id="a", text="abc", soft_labels=[{"start": 0, "end": 99, "prob": 0.7}])
    with pytest.raises(ValidationError, match=r"hard_labels.0: \[2, 1\) is not inside the text"):
        mushroom.Prediction(id="a", text="abc", hard_labels=[(2, 1)])
    pred = mushroom.detect(ANSWER, CONTEXT)
    before = list(pred.hard_labels)
    with pytest.raises(ValidationError, match="is not inside the text"):
        pred.hard_labels = [(0, 999)]
    with pytest.raises(ValidationError, match="is not inside the text"):
        pred.text = "x"
    # a refused edit leaves the prediction as it was (it stayed, and was written out)
    assert pred.hard_labels == before and pred.text == ANSWER and "(0, 999)" not in pred.model_dump_json()
    pred.hard_labels = [(0, 3)]  # an edit that fits is kept
    assert pred.spans == [(0, 3, ANSWER[:3])]
    assert mushroom.Prediction(id="b", hard_labels=[(5, 9)]).hard_labels == [(5, 9)]  # no text: not checked


def test_contexts_may_be_named_as_the_ray_rows_name_them():
    """`{"source", "text"}` dicts were refused as "a list of other things", which `item_row` takes."""
    named = mushroom.detect(ANSWER, [{"source": "wiki", "text": CONTEXT}])
    assert named.hard_labels == mushroom.detect(ANSWER, CONTEXT).hard_labels
    # the source is kept: a weight for it names a context of the item, one for context0 does not
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mushroom.detect(ANSWER, [{"source": "wiki", "text": CONTEXT}], source_weights={"wiki": 2.0})
    with pytest.warns(RuntimeWarning, match="context0"):
        mushroom.detect(ANSWER, [{"source": "wiki", "text": CONTEXT}], source_weights={"context0": 2.0})
    assert (
        mushroom.detect(ANSWER, [{"text": CONTEXT}]).hard_labels == named.hard_labels
    )  # no source: context0
    with pytest.raises(TypeError, match=r"item 0: contexts\[1\] is of type int; a context is a string"):
        mushroom.detect(ANSWER, [CONTEXT, 3])
    with pytest.raises(TypeError, match=r"item 0: contexts are a string, .* not bytes"):
        mushroom.detect(ANSWER, CONTEXT.encode())  # it said "contexts[0] is of type int"
    with pytest.raises(TypeError, match=r"contexts\[0\] is a dict without 'text'"):
        mushroom.detect(ANSWER, [{"source": "wiki", "context": CONTEXT}])


@pytest.mark.parametrize(
    ("name", "needs"),
    [
        ("lexical", {}),
        ("semantic", {}),
        ("nli", {"model": "some/hub-model"}),
        ("llm", {}),
        ("chain", {}),
        ("pyes", {"models": [{"kind": "replay", "responses": "-"}]}),
    ],
)
def test_a_hard_label_threshold_of_1_is_refused_for_what_it_does(name, needs):
    """Hard labels mark probabilities above the threshold: 1 marked nothing, with no word."""
    from mushroom.detectors import build

    with pytest.raises(mushroom.MushroomError, match="threshold 1 marks nothing.*e.g. 0.99"):
        build(name, {"threshold": 1, **needs})
    assert build(name, {"threshold": 0.99, **needs}).options.threshold == 0.99


def test_a_call_failing_in_one_thread_leaves_another_threads_call_alone():
    """One dict of kept detectors for all threads: a failed call closed the detector another
    thread was using, whose healthy request failed with "Bad file descriptor" (an audit)."""
    import threading

    backend = {**llm_backend(""), "concurrency": 4}
    results: dict[str, object] = {}
    with FakeServer({"FAILME": [("status", 500)], "": [("sleep", 1.5)]}) as server:
        backend["base_url"] = server.url

        def call(name: str, answer: str) -> None:
            try:
                results[name] = mushroom.detect(answer, CONTEXT, method="llm", backend=backend)
            except mushroom.RunFailed as exc:
                results[name] = exc

        slow = threading.Thread(target=call, args=("slow", ANSWER))
        slow.start()
        time.sleep(0.5)  # the slow request is in flight when the other one fails
        failing = threading.Thread(target=call, args=("failing", "FAILME " + ANSWER))
        failing.start()
        failing.join()
        slow.join()
    assert isinstance(results["failing"], mushroom.RunFailed)
    assert isinstance(results["slow"], mushroom.Prediction), results["slow"]


def test_numpy_contexts_and_offsets_are_taken_as_python_ones():
    """A parquet list column comes as a numpy array, a notebook's offsets as np.int64: each was
    refused ("not ndarray", "Input should be a valid integer")."""
    import numpy as np
    from pydantic import ValidationError

    assert (
        mushroom.detect(ANSWER, np.array([CONTEXT])).hard_labels
        == mushroom.detect(ANSWER, CONTEXT).hard_labels
    )
    pred = mushroom.Prediction(
        id="a",
        hard_labels=[(np.int64(0), np.int64(3))],
        soft_labels=[{"start": np.int32(0), "end": np.int64(3), "prob": 0.5}],
    )
    assert pred.hard_labels == [(0, 3)] and type(pred.hard_labels[0][0]) is int
    pred.hard_labels = [(np.int64(1), np.int64(2))]
    assert pred.hard_labels == [(1, 2)]
    pred.hard_labels = np.array([[0, 2]])  # a whole array of spans too
    assert pred.hard_labels == [(0, 2)]
    with pytest.raises(ValidationError):  # true is still no offset
        mushroom.Prediction(id="a", hard_labels=[(True, 3)])


def test_a_finished_threads_detectors_are_closed_not_kept(monkeypatch):
    """Each thread's kept detectors stayed for the process's life: a thread per request (a web
    server's) kept a model and connections per request (a review)."""
    import gc
    import threading

    from mushroom.detectors.lexical import LexicalDetector

    closed = []
    monkeypatch.setattr(LexicalDetector, "close", lambda self: closed.append(self))
    for _ in range(5):
        t = threading.Thread(target=lambda: mushroom.detect(ANSWER, CONTEXT, threshold=0.37))
        t.start()
        t.join()
    gc.collect()
    assert len(closed) == 5


def test_a_prediction_keeps_its_text_through_json_and_without_one_its_probs_are_refused():
    """Dumped, the text was dropped: read back, `probs` was [] and each span's text '' (audit)."""
    import pickle

    pred = mushroom.detect(ANSWER, CONTEXT)
    again = mushroom.Prediction.model_validate_json(pred.model_dump_json())
    assert again == pred and again.probs == pred.probs and again.spans == pred.spans
    assert mushroom.Prediction(**pred.model_dump()) == pred and pickle.loads(pickle.dumps(pred)) == pred
    assert set(pred.submission_dict()) == {"id", "soft_labels", "hard_labels"}  # the official fields
    bare = mushroom.Prediction(
        id="a", soft_labels=[{"start": 0, "end": 3, "prob": 0.5}], hard_labels=[(0, 3)]
    )
    for what in ("probs", "spans"):
        with pytest.raises(ValueError, match=f"Prediction 'a': {what} needs the answer's text"):
            getattr(bare, what)
    assert mushroom.Prediction(id="e", text="").probs == []  # an empty answer has none to give
    line = json.dumps({**pred.submission_dict(), "model_output_text": pred.text})  # as many submissions have
    assert mushroom.Prediction.model_validate_json(line).probs == pred.probs


def test_a_dataframes_empty_cells_are_keys_left_out():
    """`df.to_dict("records")` writes NaN for a row's missing contexts, lang or id: refused as floats."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        [
            {"answer": ANSWER, "contexts": [CONTEXT], "lang": "en", "id": "a", "question": "Where?"},
            {"answer": "Berlin is in Spain."},
        ]
    )
    first, second = mushroom.detect_batch(df.to_dict("records"))
    assert first.id == "a" and first.spans and second.id == "item-1"
    [pred] = mushroom.detect_batch([{"answer": ANSWER, "question": pd.NA, "lang": pd.NA}])
    assert pred.id == "item-0"


def test_detect_takes_an_id_and_names_more_misspelt_arguments():
    """Every detect() came back as id 'item', which a submission file refuses twice (an audit)."""
    import numpy as np

    pred = mushroom.detect(ANSWER, CONTEXT, id="val-en-7")
    assert pred.id == "val-en-7" and mushroom.detect(ANSWER, CONTEXT, id=3).id == "3"
    assert mushroom.detect(ANSWER, CONTEXT).id == "item"
    with pytest.raises(TypeError, match="unexpected keyword argument 'langauge' \\(did you mean lang=\\?\\)"):
        mushroom.detect(ANSWER, CONTEXT, langauge="de")
    with pytest.raises(TypeError, match="'chunk_size': detect_stream takes it"):
        mushroom.detect_batch([{"answer": ANSWER}], chunk_size=2)
    preds = list(
        mushroom.detect_stream([{"answer": ANSWER, "contexts": CONTEXT}] * 3, chunk_size=np.int64(2))
    )
    assert len(preds) == 3


def test_a_prediction_shows_its_spans_in_a_notebook():
    pred = mushroom.detect(ANSWER + " <script>", CONTEXT, id="a&b")
    page = pred._repr_html_()
    assert 'class="seg gold pred"' in page and ">Italy</span>" in page  # marked, and underlined
    assert "<script>" not in page and "&lt;" in page and "a&amp;b: 2 span(s)" in page
    assert mushroom.Prediction(id="x")._repr_html_() is None  # no text: the plain repr


def test_pyes_calls_do_not_depend_on_earlier_ones_and_a_collapsed_calibration_is_warned_of():
    """The kept detector estimated its statistics on its first call's items and reused them:
    one item gave prob 0.5 alone, another 0.999999 after it, and the CLI gave 0.196 (an audit)."""
    from tiny_models import length_p_yes

    from mushroom.backends import Backend, BackendSettings, registry
    from mushroom.backends.registry import register_backend

    class PieceConfig(BackendSettings):
        kind: str = "piece-test"

    @register_backend("piece-test", config=PieceConfig)
    class PieceBackend(Backend):
        def generate(self, requests, on_result=None):  # P(yes) from the prompt's length
            return length_p_yes(requests)

    options = {"models": [{"kind": "piece-test", "model": "p"}], "scoring": "top_logprobs", "cache": False}
    answers = ["The cat sat on the mat. It was red.", "Paris is in Spain. It has a tower. Rome is old."]
    try:
        # other options: a detector of its own, which no earlier call has used
        first = mushroom.detect(answers[0], "The cat sat.", method="pyes", **options, max_context_chars=5000)
        batch = [{"answer": a, "contexts": ["x"], "id": k} for k, a in enumerate(answers * 3)]
        mushroom.detect_batch(batch, method="pyes", **options)
        again = mushroom.detect(answers[0], "The cat sat.", method="pyes", **options)
        assert again.soft_labels == first.soft_labels
        for _ in range(2):  # each call that collapses says so (the second said nothing)
            with pytest.warns(RuntimeWarning, match="its calibration collapsed"):  # said in runs only
                mushroom.detect("One claim.", "x", method="pyes", **options)
    finally:
        registry._REGISTERED.pop("piece-test")


def test_a_misspelt_label_key_is_refused_not_kept_as_an_extra():
    """Prediction(hard_label=...) was kept as an extra key: an empty prediction, scored as such."""
    with pytest.raises(ValueError, match=r"is 'hard_label' a misspelling\?"):
        mushroom.Prediction(id="a", text="Marie", hard_label=[(0, 3)])
    assert mushroom.Prediction(id="a", text="Marie", hard_labels=[(0, 3)], note="x").hard_labels == [(0, 3)]


def test_a_label_like_extra_key_beside_a_label_is_kept_as_the_official_scorer_keeps_it():
    """Only a record with neither label is refused for a key like one: `soft_labels_raw` beside
    `hard_labels` is a valid submission line."""
    from mushroom.data.records import Prediction

    assert Prediction(id="a", hard_labels=[(0, 3)], soft_labels_raw=[1]).hard_labels == [(0, 3)]
    with pytest.raises(ValueError, match="misspelling"):
        Prediction(id="a", hard_label=[(0, 3)])


def test_the_api_computes_no_evidence_channels_unless_asked_and_predicts_the_same():
    """Channels are for a run folder's stack; the API computed and dropped them (3.4x the time
    of lexical on 1,500 items, 1.7 GB for one 2 MB answer)."""
    from mushroom.api import _without_channels

    assert _without_channels("lexical", {"threshold": 0.3}) == {"threshold": 0.3, "channels": False}
    assert _without_channels("lexical", {"channels": True}) == {"channels": True}
    assert _without_channels("nosuch", {}) == {}
    rows = [
        {"id": "a", "question": "Where was Einstein born?", "answer": "Einstein was born in Berlin.",
         "contexts": ["Albert Einstein was born in Ulm, in Germany."]},
    ]  # fmt: skip
    plain, asked = mushroom.detect_batch(rows), mushroom.detect_batch(rows, channels=True)
    assert plain[0].hard_labels == asked[0].hard_labels and plain[0].soft_labels == asked[0].soft_labels
    assert plain[0].hard_labels


def test_a_prediction_of_overlapping_hard_spans_writes_a_line_check_accepts(tmp_path, capsys):
    """Its derived soft labels overlapped, and `mushroom check` refused the line ("overlaps an
    earlier soft span") though the user gave no soft labels."""
    import json as _json

    from cli_helpers import VAL_EN, cli

    item = _json.loads(open(VAL_EN, encoding="utf-8").readline())
    pred = mushroom.Prediction(id=item["id"], hard_labels=[(0, 10), (5, 15)], text=item["model_output_text"])
    assert pred.submission_dict()["soft_labels"] == [{"start": 0, "end": 15, "prob": 1.0}]
    line = tmp_path / "p.jsonl"
    line.write_text(_json.dumps(pred.submission_dict()) + "\n")
    code, _, err = cli(capsys, "check", line, "--items", VAL_EN, "--partial")
    assert code == 0 and "overlaps an earlier soft span" not in err, err


def test_two_items_with_one_id_are_named_and_a_made_id_is_said_to_be_made():
    """It said "'item-0' is given twice" of an id the caller never gave (made for item 0)."""
    made = [
        {"answer": "Paris is in Spain.", "contexts": ["x"]},
        {"answer": "Rome.", "contexts": ["x"], "id": "item-0"},
    ]
    with pytest.raises(
        ValueError, match=r"'item-0' is the id of item 0 \(made for it: it gives no id\) and of item 1"
    ):
        mushroom.detect_batch(made, method="lexical")
    given = [{"answer": "a", "contexts": ["x"], "id": "q"}, {"answer": "b", "contexts": ["x"], "id": "q"}]
    with pytest.raises(ValueError, match=r"'q' is the id of item 0 and of item 1$"):
        mushroom.detect_batch(given, method="lexical")


def test_the_partial_read_warning_names_each_counter_once():
    """An empty sample among three voted with the other two, unsaid outside a run's counts table;
    what the share warning already said (most replies unparseable) is not said twice."""
    from mushroom.runs.service import partly_read_warning

    said = partly_read_warning("llm (en)", {"llm.replies": 3, "llm.empty_replies": 1, "llm.claims": 2})
    assert said is not None and "(llm.empty_replies 1;" in said
    most = {"llm.replies": 2, "llm.unparseable": 2, "llm.bad_probabilities": 1}
    assert "(llm.bad_probabilities 1;" in partly_read_warning("llm (en)", most)
    assert partly_read_warning("llm (en)", {"llm.replies": 2, "llm.unparseable": 2}) is None
    assert partly_read_warning("llm (en)", {"llm.replies": 2, "llm.claims": 3}) is None
