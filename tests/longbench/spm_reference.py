"""An independent tokenizer for stories260K, written from llama2.c's run.c, to count tokens
without slake: the llama2.c vocabulary file (tok512.bin: max token length, then per token its
score, byte length and bytes), SentencePiece BPE by repeatedly merging the adjacent pair whose
merged piece scores highest (the leftmost of equals), a space put before the text, byte fallback
to <0xNN> (ids 3 + byte), and the decoder of Hugging Face's Llama tokenizer (special tokens
skipped, the first piece's leading space dropped)."""
import struct

BOS, EOS = 1, 2


class SpmReference:
    def __init__(self, path):
        with open(path, "rb") as f:
            blob = f.read()
        (self.max_len,) = struct.unpack_from("<i", blob, 0)
        off, self.pieces, self.scores = 4, [], []
        while off < len(blob):
            score, n = struct.unpack_from("<fi", blob, off)
            off += 8
            self.pieces.append(blob[off:off + n])
            self.scores.append(score)
            off += n
        self.ids = {p: i for i, p in enumerate(self.pieces) if i >= 3 + 256}  # byte tokens only by fallback

    def encode(self, text, bos=True):
        tokens = []
        if text:
            text = " " + text
        for ch in text:
            b = ch.encode("utf-8")
            if b in self.ids:
                tokens.append(self.ids[b])
            else:
                tokens.extend(3 + x for x in b)
        # score[i]: the score of merging tokens i and i+1 (None when no piece is their union).
        score = [self._pair(tokens, i) for i in range(len(tokens) - 1)]
        while True:
            finite = [s for s in score if s is not None]
            if not finite:
                break
            i = score.index(max(finite))  # the leftmost of the best
            tokens[i:i + 2] = [self.ids[self.pieces[tokens[i]] + self.pieces[tokens[i + 1]]]]
            del score[i]
            if i > 0:
                score[i - 1] = self._pair(tokens, i - 1)
            if i < len(score):
                score[i] = self._pair(tokens, i)
        return ([BOS] if bos else []) + tokens

    def _pair(self, tokens, i):
        j = self.ids.get(self.pieces[tokens[i]] + self.pieces[tokens[i + 1]])
        return None if j is None else self.scores[j]

    def decode(self, tokens):
        out, first = b"", True
        for t in tokens:
            if t < 3:
                continue
            piece = bytes([t - 3]) if t < 3 + 256 else self.pieces[t]
            if first and piece.startswith(b" "):
                piece = piece[1:]
            first = False
            out += piece
        return out.decode("utf-8", "replace")
