"""Cost per item of the chain detector (decompose + verify) against the single-prompt llm detector.

Usage: python benchmarks/chain_cost.py [--lang en]

An in-process oracle backend answers from the gold labels (decomposition: one claim per gold
span plus the rest of the answer; verification: the gold spans as wrong), so no model runs and
the numbers are the prompts each detector sends: requests, prompt and completion characters
per item, and the IoU each reaches when its model is perfect (a check that nothing is lost
between stages).
"""

import argparse
import json

from _args import val_lang

from mushroom.backends.base import Backend, BackendConfig, Generation
from mushroom.data.contexts import load_contexts
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.evaluation.score import score_predictions


class Oracle(Backend):
    kind = "oracle"

    def __init__(self, items):
        super().__init__(BackendConfig(kind="replay", model="oracle"))
        self.items = {it.id: it for it in items}
        self.requests = self.prompt_chars = self.completion_chars = 0

    def answer(self, key):
        item_id, _, stage = key.partition("#")
        item = self.items[item_id]
        text = item.model_output_text
        gold = [text[s:e] for s, e in item.hard_labels or []]
        if stage.startswith("decompose"):
            claims = [{"claim": g, "substring": g} for g in gold] + [{"claim": text, "substring": text}]
            return json.dumps({"claims": claims})
        if stage.startswith("verify"):
            verdicts = [
                {"claim": k + 1, "supported": False, "incorrect_spans": [{"text": g, "probability": 1.0}]}
                for k, g in enumerate(gold)
            ]
            return json.dumps({"verdicts": verdicts})
        return json.dumps({"incorrect_spans": [{"text": g, "probability": 1.0} for g in gold]})

    def generate(self, requests, on_result=None):
        out = []
        for i, req in enumerate(requests):
            self.requests += 1
            self.prompt_chars += sum(len(m.content) for m in req.messages)
            text = self.answer(req.key)
            self.completion_chars += len(text)
            out.append(Generation(texts=[text] * req.n))
            if on_result:
                on_result(i, out[-1])
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lang", type=val_lang, default="en")
    args = parser.parse_args()
    items = load_split("val", [args.lang])[args.lang]
    ctx = load_contexts("val", args.lang).by_id
    print(
        f"{'detector':24s} {'req/item':>8s} {'prompt ch/item':>15s} {'completion ch/item':>19s} {'oracle IoU':>10s}"
    )
    for name, options in (
        ("llm", {"cache": False}),
        ("llm", {"cache": False, "temperatures": [0.1, 0.3, 0.5]}),
        ("chain", {"cache": False}),
    ):
        det = build(name, options)
        oracle = Oracle(items)
        det._backend = oracle
        preds = det.detect(items, ctx)
        n = len(items)
        label = name if name == "chain" else f"llm x{len(options.get('temperatures', [0]))} temps"
        iou = score_predictions(items, preds).mean_iou
        print(
            f"{label:24s} {oracle.requests / n:8.2f} {oracle.prompt_chars / n:15.0f} {oracle.completion_chars / n:19.0f} {iou:10.4f}"
        )


if __name__ == "__main__":
    main()
