"""Leave-one-conversation-out: judge a ranking change so that a gain on one conversation shows as such.

    python -m bench.quality.loo [--replies assistant|assistant-b|small-talk|ok] [--experiment context|bm25|neighbours|dense-skip|deadline|static-query|impute|
                                               dates|speakers|sittings|feedback|novelty|budget|coverage|
                                               inference|replies|expansion|contextual|
                                               contextual-short]
                                [--no-retained-questions] [--lag SHARE]

The dev set is three conversations. For each, the setting is chosen on the other two (best
overall score there, ties to the default) and scored on the third; all three splits are printed,
with the default's score beside each. In-process over the engine's own index (no proxy, same
episodes and the acceptance scoring of `locomo.py`), so a grid runs in a minute. As the
protocol does (`locomo.py`), each question is retained after it is asked, so later questions
find earlier ones (`--no-retained-questions`: the turns alone).

Experiments:
* `context`: how much a turn's best neighbour counts in its rank (context.WEIGHT), how far a
  turn that only asks moves down (context.ASKS_PENALTY) and how many hits are reordered
  (context.DEPTH); weight 0 and penalty 0 is the ranking without context.
* `bm25`: the lexical index's k1 and b.
* `neighbours`: how many of the best hits bring the turns next to them (packing.NEIGHBOURS_FOR).
* `dense-skip`: skip the query encoder when BM25 is already confident (the best lexical hit's
  z-score at least T): a cheaper query path, if it keeps quality.
* `deadline`: what the deadline path costs when it answers: every question by words alone
  (`lexical: deadline`) and with a quarter of the candidates, against the default.
* `impute`: with `--lag` (the newest share of each conversation not embedded yet, as when the
  backlog is behind), how much of a lexical candidate's z-score stands in for the dense z-score
  it does not have yet (index.IMPUTE_DENSE; 0 is the mean cosine, i.e. no dense evidence).
* `dates`: relative dates ("yesterday", "last Saturday") resolved against the day each turn was
  said, shown beside it and indexed (engine/dates.py), against the same turns without.
* `speakers`: how far a hit spoken by a person the question names (a `Name: text` turn) moves
  up (speakers.BOOST; 0 is off).
* `sittings`: how much a turn gains from its sitting, the turns of its session and day
  (sittings.WEIGHT x the mean of the sitting's best sittings.TOP hits; weight 0 is off).
* `feedback`: pseudo-relevance feedback (bench/quality/feedback.py, not shipped): the rarer words
  of the best `docs` hits as a second BM25 query, `terms` of them, weighted `weight`.
* `novelty`: MMR by what a hit adds (engine/novelty.py): a second hit of a sitting already placed
  moves down `penalty` z (novelty.PENALTY; 0 is off) when under `novel` (novelty.NOVEL) of its
  terms are new among the hits placed above it.
* `coverage`: neighbours for fewer of the best hits (0, 3 or 5 instead of packing.NEIGHBOURS_FOR)
  when the best 10 or 20 hits come from at least N sittings: breadth before context.
* `inference`: a question asking what a named person would, might or is likely to do or be
  (engine/character.py; the settings in bench/quality/inference.py): its query vector without the
  names, and its best hits bringing the person's own turns two away, each taken away or moved;
  per-sitting spreading and per-speaker sitting units for those questions (not shipped).
* `replies`: what an assistant's kept reply is (engine/replies.py, episodes.py; the corpus is built
  again for a setting that changes it): its stating sentences as a part of its own (the default),
  or the whole reply.
* `expansion`: the agent's words nearest the question's meaning as a second BM25 query
  (engine/expansion.py): expansion.WEIGHT x its z-score, expansion.TERMS of them; weight 0 is off.
* `contextual`: a turn's dense vector made with the turn before it (bench/quality/contextual.py, not
  shipped): instead of its own, or beside it (mean, or the higher cosine); the previous turn cut to
  its first N words; only for short turns. BM25 stays on the turn's own words. `contextual-short`:
  the second round, context for short turns only (under 15/20/30 words), replaced or the mean.
* `budget`: for scale, a larger block (3,000-8,000 tokens; past 3,000 without the 15 KB answer cap,
  which otherwise binds first): how far packing more memories into the same block could go.
* `static-query`: a static query encoder (~0.03 ms instead of MiniLM's ~1.2-2.5 ms): the question's
  vector is the mean of its WordPiece tokens' vectors, each token run through the shipped MiniLM
  alone once (model2vec's idea, without its distillation), plain or weighted by the token's idf over
  the dev turns; memories keep their MiniLM vectors.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import replace

from memplane_core.redact import Redactor

from ..harness import table, write_results
from .locomo import CATEGORIES, DATASET, REPLIES, bm25_baseline, evidence_found, load, memory_elements, protocol_reply, scores

REPLYING = {"replies": "assistant"}  # what the provider answered each turn (--replies)


def turn_entry(n: int, message: str, prefix: str = "hist1", hour: int = 0) -> dict:
    """A ledger entry as the proxy writes it for one protocol turn, with the provider's reply
    (`locomo.protocol_reply`: small talk, or "OK." with `--replies ok`)."""
    reply = protocol_reply(message, REPLYING["replies"])
    return {"id": f"{prefix}_{n}", "ts": f"2026-01-01T{hour:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z",
            "request_original": {"messages": [{"role": "user", "content": message}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": reply}}]}}}


def build(conv: dict, embedder, changes=()) -> tuple:
    """The conversation's episodes and their vectors: an index is made of them per evaluation.
    `changes`: module constants `(owner, name, value)` set while the episodes are made."""
    from memory_adapters.engine.episodes import episodes_from_entry

    redactor = Redactor()
    memories = []
    with patched(changes):
        for n, t in enumerate(conv["turns"]):
            memories += episodes_from_entry(conv["name"], turn_entry(n, t["message"]), {}, redactor)
    return memories, embedder.embed([m.value for m in memories])


def index_of(corpus: tuple):
    """An index of `(memories, vectors)`; with a third item, `{id: contextual vector}`, each memory's
    cosine is the higher of its two vectors' (contextual.MaxVectorIndex)."""
    from memory_adapters.engine.dense import VectorIndex
    from memory_adapters.engine.index import AgentIndex

    from .contextual import MaxVectorIndex

    memories, vecs = corpus[:2]
    vectors = VectorIndex(vecs.shape[1]) if len(corpus) == 2 else MaxVectorIndex(vecs.shape[1])
    if len(corpus) > 2:
        vectors.context = corpus[2]
    idx = AgentIndex(vectors=vectors)
    for m, v in zip(memories, vecs):
        idx.put(m, v)
    return idx


def block_of(packed) -> str:
    return "".join(f"<memory>{p.text}</memory>" for p in packed)


def evaluate(conv: dict, corpus: tuple, qvecs: dict, setting, retained: bool = True, lag: float = 0.0,
             asked: dict | None = None) -> tuple[list[tuple[int, bool]], float]:
    """Scores of one conversation under `setting(idx, question, vector) -> RecallQuery` (and the
    module constants its `patch` sets, if any); share of questions that skipped the encoder. With
    `retained`, each question is retained after it is asked, as through the proxy. `lag`: the
    newest share of the turns (and the retained questions) have no vector yet, as when the
    embedding backlog is behind. `qvecs`: each question's vector (what it is retained with);
    `asked`: the query vector a service asks for (of `AgentIndex.query_text`), else the same."""
    asked = qvecs if asked is None else asked
    from memory_adapters.engine.episodes import episodes_from_entry
    from memory_adapters.engine.index import recall_with_shared
    by_id = {t["id"]: t for t in conv["turns"]}
    out, skipped = [], 0
    redactor = Redactor()
    with patched(getattr(setting, "patch", ())):
        idx = index_of(corpus)
        memories = corpus[0]
        for m in memories[int(len(memories) * (1 - lag)):] if lag else ():
            idx.vectors.remove(m.id)
        for n, q in enumerate(conv["questions"]):
            rq = setting(idx, q["question"], asked[q["question"]])
            skipped += rq.vector is None
            elements = memory_elements(block_of(recall_with_shared(idx, None, rq)))
            out.append((q["category"], all(evidence_found(by_id[e]["text"], elements)
                                           for e in q["evidence"] if e in by_id)))
            if retained:
                for m in episodes_from_entry(conv["name"], turn_entry(n, q["question"], "question", 1), {}, redactor):
                    idx.put(m, None if lag else qvecs[q["question"]])
    return out, skipped / max(1, len(conv["questions"]))


@contextlib.contextmanager
def patched(changes):
    """Set `(owner, attribute, value)` for the duration; restore after."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in changes]
    try:
        for owner, name, value in changes:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def with_constants(*changes):
    """The default query, with module constants (owner, name, value) set while it is scored."""
    from memory_adapters.engine.index import RecallQuery

    def setting(idx, text, vector):
        return RecallQuery(text, vector=vector)
    setting.patch = changes
    return setting


def context_grid(*_) -> dict:
    from memory_adapters.engine import context
    out = {f"weight {context.WEIGHT}, asks penalty {context.ASKS_PENALTY} (default)": with_constants()}
    for w in (0.0, 0.1, 0.2, 0.25, 0.3, 0.4):
        for p in (0.0, 2.0, 8.0):
            if (w, p) != (context.WEIGHT, context.ASKS_PENALTY):
                out[f"weight {w}, asks penalty {p}"] = with_constants(
                    (context, "WEIGHT", w), (context, "ASKS_PENALTY", p))
    for depth in (60, 150):
        out[f"default, the best {depth} hits reordered"] = with_constants((context, "DEPTH", depth))
    return out


def bm25_grid(*_) -> dict:
    from memory_adapters.engine.lexical import LexicalIndex
    k1, b = LexicalIndex.__init__.__defaults__
    out = {f"k1 {k1}, b {b} (default)": with_constants()}
    for k1_ in (0.9, 1.2, 1.6):
        for b_ in (0.4, 0.6, 0.75, 0.9):
            if (k1_, b_) != (k1, b):
                out[f"k1 {k1_}, b {b_}"] = with_constants((LexicalIndex.__init__, "__defaults__", (k1_, b_)))
    return out


def neighbours_grid(*_) -> dict:
    from memory_adapters.engine import packing
    out = {f"neighbours for the best {packing.NEIGHBOURS_FOR} (default)": with_constants()}
    for n in (0, 5, 15, 20):
        out[f"neighbours for the best {n}"] = with_constants((packing, "NEIGHBOURS_FOR", n))
    return out


def impute_grid(*_) -> dict:
    from memory_adapters.engine import index
    return {f"impute {share} of the lexical z (default {index.IMPUTE_DENSE})" if share == index.IMPUTE_DENSE
            else f"impute {share} of the lexical z": with_constants((index, "IMPUTE_DENSE", share))
            for share in dict.fromkeys([index.IMPUTE_DENSE, 0.0, 0.25, 0.5, 0.75, 1.0])}


def speakers_grid(*_) -> dict:
    """How far a hit spoken by a person the question names moves up (speakers.BOOST; 0 is off)."""
    from memory_adapters.engine import speakers
    out = {f"boost {speakers.BOOST} (default)": with_constants()}
    for boost in (0.0, 2.0, 3.0, 4.0, 6.0, 8.0):
        if boost != speakers.BOOST:
            out[f"boost {boost}" if boost else "boost 0 (off)"] = with_constants((speakers, "BOOST", boost))
    return out


def sittings_grid(*_) -> dict:
    """A turn lifted by the best hits of its sitting (sittings.py): weight x the mean of the best `top`."""
    from memory_adapters.engine import sittings
    out = {f"weight {sittings.WEIGHT}, top {sittings.TOP} (default)": with_constants()}
    out["weight 0 (off)"] = with_constants((sittings, "WEIGHT", 0.0))
    for weight in (0.2, 0.3, 0.4, 0.6, 0.8):
        for top in (1, 2, 3, 5):
            if (weight, top) != (sittings.WEIGHT, sittings.TOP):
                out[f"weight {weight}, top {top}"] = with_constants((sittings, "WEIGHT", weight),
                                                                    (sittings, "TOP", top))
    return out


def feedback_grid(*_) -> dict:
    """The best hits' words as a second query (feedback.py, not shipped): weight x its z, `terms` of the best `docs`."""
    from . import feedback
    out = {"off (default)": with_constants()}
    for weight in (0.15, 0.25, 0.4):
        for docs in (5, 10, 20):
            for n_terms in (5, 10):
                out[f"weight {weight}, {n_terms} terms of the best {docs}"] = with_constants(
                    *feedback.patch(weight, docs, n_terms))
    return out


def novelty_grid(*_) -> dict:
    """MMR by new terms within a sitting (engine/novelty.py): a repeat of a placed sitting that adds few terms moves down."""
    from memory_adapters.engine import novelty
    out = {f"penalty {novelty.PENALTY} when under {novelty.NOVEL:.0%} new terms (default)": with_constants(),
           "off": with_constants((novelty, "PENALTY", 0.0))}
    for penalty in (0.25, 0.5, 1.0, 2.0):
        for novel in (0.3, 0.5, 0.7, 0.9):
            if (penalty, novel) != (novelty.PENALTY, novelty.NOVEL):
                out[f"penalty {penalty} when under {novel:.0%} new terms"] = with_constants(
                    (novelty, "PENALTY", penalty), (novelty, "NOVEL", novel))
    return out


def contextual_grid(embedder, convs) -> dict:
    """Contextual turn embeddings (bench/quality/contextual.py): a turn's dense vector with the turn
    before it."""
    from . import contextual
    return contextual.grid(embedder, convs)


def contextual_short_grid(embedder, convs) -> dict:
    """Contextual turn embeddings for short turns only (the second round, contextual.py)."""
    from . import contextual
    return contextual.grid(embedder, convs, short=True)


def expansion_grid(*_) -> dict:
    """The agent's words nearest the question as a second BM25 query (engine/expansion.py): weight x
    its z-score, `terms` of them; weight 0 is off."""
    from memory_adapters.engine import expansion
    out = {f"weight {expansion.WEIGHT}, {expansion.TERMS} terms (default)": with_constants(),
           "off": with_constants((expansion, "WEIGHT", 0.0))}
    for weight in (0.05, 0.1, 0.2):
        for n_terms in (10, 20, 40):
            if (weight, n_terms) != (expansion.WEIGHT, expansion.TERMS):
                out[f"weight {weight}, {n_terms} terms"] = with_constants((expansion, "WEIGHT", weight),
                                                                           (expansion, "TERMS", n_terms))
    return out


def spread_neighbours(top: int, sittings: int, fewer: int):
    """`with_constants` changes: neighbours for only the best `fewer` hits (packing.NEIGHBOURS_FOR) when the
    best `top` hits of a recall come from at least `sittings` sittings (a question whose answer is
    spread: breadth first). In-process only: the constant is set per recall, before it packs."""
    from memory_adapters.engine import packing
    from memory_adapters.engine.index import AgentIndex

    engine_ranked, default = AgentIndex._ranked, packing.NEIGHBOURS_FOR

    def ranked(self, text, vector, k, now, visible, limit, in_context):
        out = engine_ranked(self, text, vector, k, now, visible, limit, in_context)
        if in_context:
            of = self.sittings.of
            spread = len({of.get(d, d) for d, _ in out[:top]})
            packing.NEIGHBOURS_FOR = fewer if spread >= sittings else default
        return out
    return ((AgentIndex, "_ranked", ranked), (packing, "NEIGHBOURS_FOR", default))


def coverage_grid(*_) -> dict:
    """Coverage before context: fewer neighbours when the best hits are spread over many sittings."""
    out = {"neighbours for the best 10 always (default)": with_constants()}
    for top, sittings in ((10, 6), (10, 8), (10, 10), (20, 8), (20, 10), (20, 12), (20, 14)):
        for fewer in (0, 3, 5):
            out[f"best {top} from >= {sittings} sittings: neighbours for {fewer}"] = with_constants(
                *spread_neighbours(top, sittings, fewer))
    return out


def inference_grid(embedder, _convs) -> dict:
    """Questions about a named person's character (engine/character.py; settings in inference.py)."""
    from . import inference
    return inference.grid(embedder)


def budget_grid(*_) -> dict:
    """For scale, not a change: a larger block (budget in tokens; without the 15 KB answer cap past 3,000)."""
    from memory_adapters.engine import packing
    from memory_adapters.engine.index import RecallQuery

    def budget(tokens: int):
        def setting(idx, text, vector):
            return RecallQuery(text, vector=vector, budget_tokens=tokens)
        setting.patch = ((packing.pack, "__kwdefaults__", {"max_bytes": 10 ** 7}),) if tokens > 3_000 else ()
        return setting
    return {f"budget {tokens} tokens" + (" (default)" if tokens == 3_000 else ""): budget(tokens)
            for tokens in (3_000, 3_600, 4_500, 6_000, 8_000)}


def dates_grid(*_) -> dict:
    """Relative dates resolved against the day said (dates.py), shown and indexed, against none."""
    from memory_adapters.engine import index, packing

    def none(metadata) -> str:
        return ""
    return {"relative dates resolved (default)": with_constants(),
            "no resolved dates": with_constants((packing, "note", none), (index, "indexed", none))}


def replies_grid(*_) -> dict:
    """What a kept reply is (`replies`). A setting's `building`: the constants set while its corpus
    is made (a corpus of its own)."""
    from memory_adapters.engine import episodes, replies

    def whole(reply: str, user: str) -> list[str]:
        return [reply] if replies.adds_fact(reply, user) else []

    def built(*changes):
        setting = with_constants()
        setting.building = changes
        return setting
    return {"the reply's stating sentences, its own part (default)": with_constants(),
            "the whole reply, its own part": built((episodes, "stated", whole))}


def dense_skip(threshold: float):
    from memory_adapters.engine.index import RecallQuery

    def setting(idx, text, vector):
        hits, mean, std = idx.lexical.scored(text, 1)
        confident = bool(hits) and std > 0 and (hits[0][1] - mean) / std >= threshold
        return RecallQuery(text, vector=None if confident else vector)
    return setting


def deadline_path(lexical: bool, fewer: bool):
    from memory_adapters.engine.index import CANDIDATES, RecallQuery

    def setting(idx, text, vector):
        q = RecallQuery(text, vector=None if lexical else vector)
        return replace(q, candidates=CANDIDATES // 4) if fewer else q
    return setting


def static_query(embedder, convs) -> dict:
    """`static-query`'s settings: MiniLM (the default) against the two static encoders."""
    import numpy as np

    from memory_adapters.engine.index import RecallQuery
    session, tokenizer = embedder.encoder.session, embedder.encoder.tokenizer
    turns = [t["message"] for c in convs for t in c["turns"]]
    df: dict[int, int] = {}
    for text in turns:
        for i in set(tokenizer.encode(text).ids):
            df[i] = df.get(i, 0) + 1
    table: dict[int, np.ndarray] = {}

    def token_vector(i: int) -> np.ndarray:
        if i not in table:
            ids = np.array([[tokenizer.token_to_id("[CLS]"), i, tokenizer.token_to_id("[SEP]")]], dtype=np.int64)
            table[i] = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0]
        return table[i]

    def static(weighted: bool):
        def setting(idx, text, vector):
            ids = tokenizer.encode(text).ids[1:-1]
            if not ids:
                return RecallQuery(text, vector=vector)
            w = np.array([np.log((len(turns) + 1) / (df.get(i, 0) + 1)) if weighted else 1.0 for i in ids])
            v = (np.stack([token_vector(i) for i in ids]) * w[:, None]).sum(0)
            return RecallQuery(text, vector=(v / (np.linalg.norm(v) or 1.0)).astype(np.float32))
        return setting

    return {"MiniLM (default)": with_constants(), "static, mean of tokens": static(False),
            "static, idf-weighted": static(True)}


EXPERIMENTS = {
    "context": context_grid,
    "bm25": bm25_grid,
    "neighbours": neighbours_grid,
    "dense-skip": {"default (never skip)": dense_skip(float("inf")),
                   **{f"skip when top BM25 z >= {t}": dense_skip(t) for t in (12, 10, 8, 6)}},
    "deadline": {"default (dense+lexical)": deadline_path(False, False),
                 "fewer candidates": deadline_path(False, True),
                 "lexical: deadline": deadline_path(True, False),
                 "lexical, fewer candidates": deadline_path(True, True)},
    "static-query": static_query,
    "impute": impute_grid,
    "dates": dates_grid,
    "speakers": speakers_grid,
    "sittings": sittings_grid,
    "feedback": feedback_grid,
    "novelty": novelty_grid,
    "budget": budget_grid,
    "replies": replies_grid,
    "inference": inference_grid,
    "coverage": coverage_grid,
    "expansion": expansion_grid,
    "contextual": contextual_grid,
    "contextual-short": contextual_short_grid,
}


def query_vectors(embedder, convs: list[dict], corpora: dict, qvecs: dict) -> dict:
    """Each question's query vector as the services ask for it: of `AgentIndex.query_text(question)`
    (a question about a speaker's character: without their names), per conversation's speakers."""
    out = {}
    for c in convs:
        idx = index_of(corpora[c["name"]])
        texts = {q["question"]: idx.query_text(q["question"]) for q in c["questions"]}
        other = [q for q, text in texts.items() if text != q]
        out[c["name"]] = {**{q: qvecs[q] for q in texts},
                          **dict(zip(other, embedder.embed([texts[q] for q in other]) if other else ()))}
    return out


def corpora_of(settings: dict, convs: list[dict], corpora: dict, embedder) -> dict:
    """The corpora of the settings that change it, by setting and conversation: built again with
    constants set (`building`), or made from the default's (`rebuilt(conversation, corpus)`)."""
    out = {}
    for name, s in settings.items():
        if getattr(s, "building", ()):
            out[name] = {c["name"]: build(c, embedder, s.building) for c in convs}
        elif getattr(s, "rebuilt", None) is not None:
            out[name] = {c["name"]: s.rebuilt(c["name"], corpora[c["name"]]) for c in convs}
    return out


def three(score: float | None) -> str:
    """Scores to three places: one question of 385 is 0.003, one multi-hop question of 74 is 0.014."""
    return "-" if score is None else f"{score:.3f}"


def prepared(embedder, convs: list[dict], experiment: str) -> tuple[dict, dict, dict, dict]:
    """What an experiment is scored with: each conversation's episodes and vectors, every question's
    vector, the vector each is asked with, and the experiment's settings by name."""
    corpora = {c["name"]: build(c, embedder) for c in convs}
    questions = [q["question"] for c in convs for q in c["questions"]]
    qvecs = dict(zip(questions, embedder.embed(questions)))
    asked = query_vectors(embedder, convs, corpora, qvecs)
    settings = EXPERIMENTS[experiment]
    return corpora, qvecs, asked, settings(embedder, convs) if callable(settings) else settings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", choices=sorted(EXPERIMENTS), default="context")
    p.add_argument("--lag", type=float, default=0.0,
                   help="share of each conversation's newest turns not embedded yet (a backlog behind)")
    p.add_argument("--no-retained-questions", dest="retained", action="store_false",
                   help="score over the conversation's turns alone (the questions are not retained)")
    p.add_argument("--replies", choices=REPLIES, default="assistant",
                   help='what the provider answered each turn (fake_provider/repliers.py): an ordinary chat '
                        'assistant\'s replies (assistant, the default), the held-out assistant-b, small-talk, or "OK."')
    args = p.parse_args()
    REPLYING["replies"] = args.replies
    if not DATASET.is_dir():
        print(f"leave-one-out skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return
    from memory_adapters.engine.dense import Embedder
    embedder = Embedder.load()
    convs = load(DATASET)
    started = time.perf_counter()
    corpora, qvecs, asked, settings = prepared(embedder, convs, args.experiment)
    built = corpora_of(settings, convs, corpora, embedder)

    def corpus(name: str, conv: str) -> tuple:
        return built[name][conv] if name in built else corpora[conv]
    grid: dict[str, dict[str, tuple[list, float]]] = {
        name: {c["name"]: evaluate(c, corpus(name, c["name"]), qvecs, s, args.retained, args.lag, asked[c["name"]])
               for c in convs}
        for name, s in settings.items()}
    default = next(iter(settings))
    rows, doc = [], {}
    for held in convs:
        train = [c["name"] for c in convs if c is not held]

        def train_score(name: str) -> float:
            return scores([r for c in train for r in grid[name][c][0]])["all"]
        chosen = max(settings, key=lambda n: (train_score(n), n == default))
        got, base = scores(grid[chosen][held["name"]][0]), scores(grid[default][held["name"]][0])
        rows.append([held["name"], chosen, *map(three, (train_score(chosen), got["all"], base["all"],
                                                         got.get("multi-hop"), base.get("multi-hop"))),
                     round(grid[chosen][held["name"]][1], 2)])
        doc[held["name"]] = {"chosen": chosen, "held_out": got, "default_held_out": base}
    print(table(["held out", "chosen on the other two", "train all", "held-out all", "default all",
                 "held-out multi-hop", "default multi-hop", "encoder skipped"], rows))
    every = [[name, *[three(scores(grid[name][c["name"]][0])["all"]) for c in convs],
              three(scores([r for c in convs for r in grid[name][c["name"]][0]])["all"]),
              three(scores([r for c in convs for r in grid[name][c["name"]][0]]).get("multi-hop")),
              round(sum(grid[name][c["name"]][1] for c in convs) / len(convs), 2)] for name in settings]
    print(table(["setting", *[c["name"] for c in convs], "all", "multi-hop", "encoder skipped"], every))
    cats = [*CATEGORIES.values(), "all"]
    print(table(["setting", "conversation", *cats],
                [[name, c["name"], *[three(scores(grid[name][c["name"]][0]).get(k)) for k in cats]]
                 for name in settings for c in convs] +
                [["baseline: BM25 top 8 over raw turns", c["name"], *[three(bm25_baseline([c]).get(k)) for k in cats]]
                 for c in convs] +
                [["baseline: BM25 top 8 over raw turns", "all", *[three(bm25_baseline(convs).get(k)) for k in cats]]]))
    path = write_results(f"loo-{args.experiment}", {"retained_questions": args.retained, "replies": args.replies,
                                                    "splits": doc, "grid": {
        name: {c: {"scores": scores(v[0]), "skipped": v[1]} for c, v in per.items()} for name, per in grid.items()}})
    print(f"leave-one-conversation-out, {args.experiment}, replies {args.replies}, "
          f"questions {'retained' if args.retained else 'not retained'}, "
          f"{time.perf_counter() - started:.0f} s ({path.name}); "
          f"categories {', '.join(CATEGORIES.values())}")


if __name__ == "__main__":
    main()
