"""POST /v1/rerank (/rerank, /v2/rerank, and vLLM's /score) against an independent PyTorch reference
(tests/reference/reference_model.py) of the bundled weights: each document's score is
P("yes") / (P("yes") + P("no")) after Qwen3-Reranker's prompt (the prompt and the formula
written here from the reranker's model card, not from loom's code), an answer spelt in
several tokens scoring with the sum of their log-probabilities. Order and scores match."""
import math
import os
import sys
import unittest

import torch

from serve_harness import DEFAULT_MODEL, SOURCE_DIR, Server

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "reference"))
import reference_model  # noqa: E402

QUERY = "Who made the heaven and the earth?"
DOCS = ["In the beginning God created the heaven and the earth.", "Jesus wept.",
        "And the serpent was more subtil than any beast of the field.", "The LORD is my shepherd; I shall not want."]
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def reranker_prompt(query, document, instruction=INSTRUCTION):
    return ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
            "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
            f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


class Rerank(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.model = reference_model.Model(DEFAULT_MODEL)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def tokens(self, text):
        status, _, r = self.server.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        self.assertEqual(status, 200, r)
        return r["tokens"]

    def answer_logprob(self, prompt_ids, answer_ids):
        ids = prompt_ids + answer_ids
        with torch.no_grad():
            logits = self.model.forward(ids).reshape(len(ids), -1).double()
        lp = torch.log_softmax(logits, dim=-1)
        return sum(lp[len(prompt_ids) - 1 + k, a].item() for k, a in enumerate(answer_ids))

    def reference_scores(self, query, docs, instruction=INSTRUCTION):
        yes, no = self.tokens("yes"), self.tokens("no")
        scores = []
        for d in docs:
            p = self.tokens(reranker_prompt(query, d, instruction))
            scores.append(1.0 / (1.0 + math.exp(self.answer_logprob(p, no) - self.answer_logprob(p, yes))))
        return scores

    def test_scores_and_order_match_the_reference(self):
        status, _, r = self.server.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
        self.assertEqual(status, 200, r)
        ref = self.reference_scores(QUERY, DOCS)
        order = sorted(range(len(DOCS)), key=lambda i: -ref[i])
        self.assertEqual([x["index"] for x in r["results"]], order, (r, ref))
        for x in r["results"]:
            # The bundled model is no reranker: its scores are small, so they are compared relatively.
            self.assertTrue(math.isclose(x["relevance_score"], ref[x["index"]], rel_tol=1e-3, abs_tol=1e-7),
                            (x, ref[x["index"]]))
            self.assertEqual(x["document"]["text"], DOCS[x["index"]])
        self.assertGreater(r["usage"]["total_tokens"], 0)
        # The scores must tell the documents apart for the order to mean anything.
        self.assertGreater(max(ref) / min(ref), 1.1)

    def test_shapes_and_aliases(self):
        body = {"query": QUERY, "documents": [{"text": d} for d in DOCS], "top_n": 2, "return_documents": False,
                "instruction": "Find the verse"}
        replies = []
        for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
            status, _, r = self.server.post(path, body)
            self.assertEqual(status, 200, r)
            self.assertEqual(len(r["results"]), 2)
            self.assertNotIn("document", r["results"][0])
            replies.append([(x["index"], round(x["relevance_score"], 6)) for x in r["results"]])
        self.assertEqual(replies[0], replies[1])
        self.assertEqual(replies[0], replies[2])
        ref = self.reference_scores(QUERY, DOCS, "Find the verse")
        self.assertEqual([i for i, _ in replies[0]], sorted(range(len(DOCS)), key=lambda i: -ref[i])[:2])

    def test_vllm_score_gives_the_same_scores(self):
        status, _, r = self.server.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
        self.assertEqual(status, 200, r)
        by_index = {x["index"]: x["relevance_score"] for x in r["results"]}
        for path in ("/score", "/v1/score"):
            status, _, s = self.server.post(path, {"text_1": QUERY, "text_2": DOCS})
            self.assertEqual(status, 200, s)
            self.assertEqual(s["object"], "list")
            self.assertEqual([d["index"] for d in s["data"]], list(range(len(DOCS))))
            for d in s["data"]:
                self.assertEqual(d["object"], "score")
                self.assertAlmostEqual(d["score"], by_index[d["index"]], places=9)
        status, _, one = self.server.post("/score", {"text_1": QUERY, "text_2": DOCS[0]})
        self.assertEqual(status, 200, one)
        self.assertAlmostEqual(one["data"][0]["score"], by_index[0], places=9)
        for body, param in (({"text_2": DOCS}, "text_1"), ({"text_1": QUERY}, "text_2"),
                            ({"text_1": QUERY, "text_2": ["a", 1]}, "text_2[1]")):
            status, _, e = self.server.post("/score", body)
            self.assertEqual((status, e["error"]["param"]), (400, param))

    def test_bad_requests_name_the_field(self):
        for body, param in (({"documents": DOCS}, "query"), ({"query": QUERY}, "documents"),
                            ({"query": QUERY, "documents": []}, "documents"),
                            ({"query": QUERY, "documents": ["a", 3]}, "documents[1]"),
                            ({"query": QUERY, "documents": DOCS, "top_n": 0}, "top_n"),
                            ({"query": QUERY, "documents": DOCS, "model": "nope"}, "model")):
            status, _, r = self.server.post("/v1/rerank", body)
            self.assertIn(status, (400, 404), r)
            self.assertEqual(r["error"]["param"], param)
        status, _, r = self.server.post("/v1/rerank", {"query": QUERY, "documents": ["word " * 400]})
        self.assertEqual(status, 400)
        self.assertEqual(r["error"]["param"], "documents[0]")


if __name__ == "__main__":
    unittest.main()
