"""The C tokenizers against the Hugging Face `tokenizers` library, byte for
byte (issue 31): python tokenizer_hf.py TOKENIZE_TOOL

1. The GPT-2 pre-tokenizer's Unicode classes: every code point, in the
   contexts that tell letter, number, white space and other apart, splits
   as the library's ByteLevel pre-tokenizer splits it.
2. Byte-level BPE tokenizer.json files trained here by the library (offline,
   on generated text): GPT-2's shape (add_prefix_space false, a special
   <|endoftext|>), add_prefix_space true, merges in the legacy "a b" string
   form, added tokens with lstrip/rstrip and normalized false,
   ignore_merges, a vocabulary missing bytes with an unk token (fused and
   not) and without one, byte fallback. On each, many texts (words,
   contractions, digits, white-space runs, every script, emoji, added
   tokens in the middle of words) encode to the library's ids exactly, also
   when encoded in pieces cut where ty_tokenizer_cut says.
3. Malformed and unsupported files are refused naming the field.
4. A BPE learned by the C learner decodes back to its text and is the same
   every time.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from tokenizers import AddedToken

TOOL = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run_tool(args, lines):
    data = "".join(json.dumps(s) + "\n" for s in lines)
    r = subprocess.run([TOOL] + args, input=data.encode(), capture_output=True)
    if r.returncode not in (0, 1) or r.stderr:  # a sanitizer's report too
        raise SystemExit("tokenize_tool failed (%d): %s" %
                         (r.returncode, r.stderr.decode()[:2000]))
    return [json.loads(l) for l in r.stdout.decode().splitlines()]


def byte_offsets(s, pieces):
    """Char offsets of the library's pieces -> byte offsets."""
    pos = [0]
    for ch in s:
        pos.append(pos[-1] + len(ch.encode()))
    return [[pos[a], pos[b]] for _, (a, b) in pieces]


# ---- 1. Unicode classes ----------------------------------------------------
bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
texts = []
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    c = chr(cp)
    texts.append("a%s1%s!%s %s\t%s" % (c, c, c, c, c))
ours = run_tool(["pretok"], texts)
bad = 0
for s, got in zip(texts, ours):
    want = byte_offsets(s, bl.pre_tokenize_str(s))
    if got != want:
        bad += 1
        if bad <= 5:
            print("pre-tokens of %r: C %s, tokenizers %s" % (s, got, want))
check(bad == 0, "%d code points split differently from tokenizers" % bad)
print("unicode classes: %d code points checked" % len(texts))

# ---- texts -------------------------------------------------------------------
rng = random.Random(31)
WORDS = ("the of and to in is was he for it with as his on be at by I that "
         "had not are but from or have an they which one you were her all "
         "she there would their we him been has when who will more no if out "
         "so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our "
         "over man me even most made after also did many before must through "
         "ROMEO JULIET Capulet Montague thou thee art doth hath").split()
SCRIPTS = ["héllo wörld çà", "Привет мир", "Γειά σου κόσμε", "שלום עולם",
           "مرحبا بالعالم", "नमस्ते दुनिया", "你好，世界", "こんにちは世界",
           "안녕하세요 세계", "สวัสดีชาวโลก", "e\u0301\u0302 n\u0303",
           "😀 👍🏽 👨‍👩‍👧 🇫🇷 ❤️", "١٢٣ ٤٥٦ ۷۸۹ ๑๒๓ ½ ² Ⅻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
           "\u00a0\u3000\u2003\u2028\u2029\u0085\u200b\ufeff"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0",
          "\u3000", " \t\n", "     \n"]
PUNCT = [".", ",", "!", "?", "'", "\"", "...", "--", "(", ")", ":", ";",
         "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s",
         "$", "%", "&", "@", "#", "```", "->", "<", "|", ">", "<|", "|>"]


def random_text(n, specials=()):
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.45:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.1 else w)
        elif r < 0.6:
            parts.append(rng.choice(SPACES))
        elif r < 0.72:
            parts.append(rng.choice(PUNCT))
        elif r < 0.8:
            parts.append(str(rng.randrange(0, 10 ** rng.randrange(1, 8))))
        elif r < 0.88:
            s = rng.choice(SCRIPTS)
            a = rng.randrange(len(s))
            parts.append(s[a:a + rng.randrange(1, 8)])
        elif r < 0.93 and specials:
            parts.append(rng.choice(specials))
        elif r < 0.97:
            parts.append(chr(rng.choice([rng.randrange(0x20, 0x7f),
                                         rng.randrange(0xa0, 0x3000),
                                         rng.randrange(0x10000, 0x10ffff)])
                             ) if True else "")
        else:
            parts.append(" ")
        if rng.random() < 0.5:
            parts.append(" ")
    s = "".join(parts)
    # no lone surrogates
    return s.encode("utf-8", "replace").decode("utf-8")


corpus = "\n".join(random_text(200) for _ in range(300))
SPECIALS = ["<|endoftext|>", "<pad>", "[X]", "<|im_start|>"]
tests = [random_text(rng.randrange(1, 60), SPECIALS) for _ in range(2500)]
tests += ["", " ", "  ", "\n", "a", " a", "  a", "'s", " 's", "it's", "IT'S",
          "don't you'll we've I'm he'd they're", "a  b   c    d", "x\n\ny",
          "x \n y", "  \n\n  z  ", "<|endoftext|>", " <|endoftext|> ",
          "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "<|endoftext",
          "[X][X] [X]", "1234567890", "3.14159", "٣٤", "🙂🙂🙂", "\u3000a",
          "a\u00a0b", "\t\tx", "x\t\t", "e\u0301", " \u0301", "ab" * 300,
          corpus[:20000]]


def train(vocab_size, alphabet=True, unk=None, special=("<|endoftext|>",),
          add_prefix_space=False, text=None):
    tok = Tokenizer(models.BPE(unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(special) + ([unk] if unk else []),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if alphabet else [],
        show_progress=False)
    tok.train_from_iterator([text or corpus], trainer=tr)
    return tok


def compare(name, tok_json, texts):
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    tmp.write(tok_json)
    tmp.close()
    lib = Tokenizer.from_str(tok_json)
    want = [lib.encode(t).ids for t in texts]
    for mode in ("encode", "chunked"):
        got = run_tool([mode, tmp.name], texts)
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
        for i in bad[:3]:
            print("%s (%s): %r\n  C   %s\n  lib %s" % (name, mode, texts[i],
                                                   got[i], want[i]))
        check(len(got) == len(want) and not bad,
              "%s (%s): %d of %d texts encode differently" %
              (name, mode, len(bad), len(texts)))
    os.unlink(tmp.name)
    print("%s: %d texts, %d tokens" % (name, len(texts),
                                       sum(len(w) for w in want)))


def variant(tok, fn):
    j = json.loads(tok.to_str())
    fn(j)
    return json.dumps(j)


gpt2 = train(1200)
compare("gpt2-like", gpt2.to_str(), tests)
compare("add_prefix_space", train(800, add_prefix_space=True).to_str(), tests)


def legacy_merges(j):
    j["model"]["merges"] = ["#version: 0.2"] + [
        "%s %s" % tuple(m) for m in j["model"]["merges"]]


compare("legacy merges", variant(gpt2, legacy_merges), tests)
with_added = Tokenizer.from_str(gpt2.to_str())
with_added.add_special_tokens([AddedToken("<|im_start|>", lstrip=True,
                                          rstrip=True, normalized=False)])
with_added.add_tokens([AddedToken("[X]", rstrip=True), AddedToken("the", normalized=False),
                       AddedToken("<pad>", lstrip=True)])
compare("added tokens", with_added.to_str(), tests)


def ignore_merges(j):
    j["model"]["ignore_merges"] = True


compare("ignore_merges", variant(gpt2, ignore_merges), tests)
# trained on ASCII only: every other byte is unknown to it
sparse = train(600, alphabet=False, unk="<unk>",
               text="".join(c for c in corpus if c < "\x7f"))
compare("unk", sparse.to_str(), tests)


def fuse(j):
    j["model"]["fuse_unk"] = True


compare("fuse_unk", variant(sparse, fuse), tests)


def no_unk(j):
    j["model"]["unk_token"] = None


compare("no unk", variant(sparse, no_unk), tests)


def byte_fallback(j):
    v = j["model"]["vocab"]
    n = max(v.values()) + 1
    for b in range(256):
        if b % 3 == 0:
            v["<0x%02X>" % b] = n
            n += 1
    j["model"]["byte_fallback"] = True


compare("byte_fallback", variant(sparse, byte_fallback), tests)

# ---- 3. refusals ---------------------------------------------------------------
base = json.loads(gpt2.to_str())


def refused(name, mutate, field):
    j = json.loads(json.dumps(base))
    mutate(j)
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    tmp.write(json.dumps(j) if not isinstance(j, str) else j)
    tmp.close()
    out = run_tool(["encode", tmp.name], ["x"])
    os.unlink(tmp.name)
    got = out[0].get("field") if out and isinstance(out[0], dict) else None
    check(got == field, "%s: refused naming %r, want %r (%s)" %
          (name, got, field, out))


def set_in(path, value):
    def f(j):
        o = j
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value
    return f


refused("merge not in vocab", lambda j: j["model"]["merges"].__setitem__(12, ["zzq", "qq"]),
        "tokenizer.model.merges[12]")
refused("merge not a pair", lambda j: j["model"]["merges"].__setitem__(3, ["a"]),
        "tokenizer.model.merges[3]")
refused("WordPiece", set_in(["model", "type"], "WordPiece"), "tokenizer.model.type")
refused("normalizer", set_in(["normalizer"], {"type": "NFC"}), "tokenizer.normalizer.type")
refused("pre_tokenizer", set_in(["pre_tokenizer"], {"type": "Whitespace"}),
        "tokenizer.pre_tokenizer.type")
refused("post_processor", set_in(["post_processor"], {"type": "TemplateProcessing"}),
        "tokenizer.post_processor.type")
refused("dropout", set_in(["model", "dropout"], 0.1), "tokenizer.model.dropout")
refused("vocab id", set_in(["model", "vocab", "the"], -4), "tokenizer.model.vocab")
refused("added id", lambda j: j["added_tokens"][0].__setitem__("id", 999999),
        "tokenizer.added_tokens[0].id")
refused("single_word", lambda j: j["added_tokens"][0].__setitem__("single_word", True),
        "tokenizer.added_tokens[0].single_word")
refused("no model", lambda j: j.pop("model") and j.__setitem__("type", None),
        "tokenizer.type")

# ---- 4. the learner ------------------------------------------------------------
r1 = subprocess.run([TOOL, "learn", "700"], input=corpus.encode(), capture_output=True)
r2 = subprocess.run([TOOL, "learn", "700"], input=corpus.encode(), capture_output=True)
d = json.loads(r1.stdout)
check(r1.stdout == r2.stdout and d["type"] == "bpe" and d["vocab_size"] == 700,
      "learned BPE: deterministic, 700 ids (%s)" % r1.stdout[:200])
tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
tmp.write(r1.stdout.decode())
tmp.close()
enc = run_tool(["encode", tmp.name], tests[:200])
os.unlink(tmp.name)
check(all(isinstance(e, list) for e in enc), "learned BPE encodes every text")
check(sum(len(e) for e in enc) < sum(len(t.encode()) for t in tests[:200]) * 0.7,
      "learned BPE compresses the text (%d ids for %d bytes)" %
      (sum(len(e) for e in enc), sum(len(t.encode()) for t in tests[:200])))

if failures:
    print("%d failed" % len(failures))
    sys.exit(1)
print("all tokenizer parity checks passed")
