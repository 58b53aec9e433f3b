#include "tokenizer/test_corpus.h"

#include <string_view>

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer_testing {

namespace {

using tokenizer_internal::AppendCodePoint;

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Uniform(size_t n) { return static_cast<size_t>(Next() % n); }
  template <typename T, size_t N>
  const T& Pick(const T (&arr)[N]) {
    return arr[Uniform(N)];
  }

 private:
  uint64_t state_;
};

constexpr std::string_view kWords[] = {"the",       "of",        "and",        "a",
                                       "to",        "in",        "is",         "you",
                                       "that",      "it",        "he",         "was",
                                       "for",       "on",        "are",        "as",
                                       "with",      "his",       "they",       "I",
                                       "at",        "be",        "this",       "have",
                                       "from",      "or",        "one",        "had",
                                       "by",        "word",      "but",        "not",
                                       "what",      "all",       "were",       "we",
                                       "when",      "your",      "can",        "said",
                                       "there",     "use",       "an",         "each",
                                       "which",     "she",       "do",         "how",
                                       "their",     "if",        "will",       "up",
                                       "other",     "about",     "out",        "many",
                                       "then",      "them",      "these",      "so",
                                       "some",      "her",       "would",      "make",
                                       "like",      "him",       "into",       "time",
                                       "has",       "look",      "two",        "more",
                                       "write",     "go",        "see",        "number",
                                       "no",        "way",       "could",      "people",
                                       "my",        "than",      "first",      "water",
                                       "been",      "call",      "who",        "oil",
                                       "its",       "now",       "find",       "long",
                                       "down",      "day",       "did",        "get",
                                       "come",      "made",      "may",        "part",
                                       "inference", "tokenizer", "throughput", "latency",
                                       "scheduler", "don't",     "it's",       "we're",
                                       "they've",   "I'm",       "you'll",     "she'd",
                                       "Tokyo",     "London",    "Mr.",        "e.g.",
                                       "i.e.",      "etc.",      "naïve",      "café",
                                       "résumé",    "coöperate", "façade",     "jalapeño",
                                       "Zürich",    "São",       "well-known", "state-of-the-art",
                                       "GPU",       "CPU",       "HTTP/2",     "JSON",
                                       "UTF-8",     "ASCII"};

constexpr std::string_view kPunct[] = {".", ",", ";", ":", "!", "?", "...", " —",    " -", "\"",
                                       "'", ")", "(", "…", "“", "”", "’",   " (see", "%"};

constexpr std::string_view kCode[] = {
    "#include <vector>\n#include \"tokenizer/tokenizer.h\"\n\nnamespace deepinfer {\n",
    "int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) {\n    "
    "std::cout << argv[i] << '\\n';\n  }\n  return 0;\n}\n",
    "def encode(self, text: str) -> list[int]:\n    \"\"\"Encode text.\"\"\"\n    if not "
    "text:\n        return []\n    return [self.vocab[t] for t in text.split()]\n",
    "const x = arr.map((v, i) => v * 2 + i).filter(Boolean);\nconsole.log(`x=${x}`);\n",
    "\tif (a != b && c >= d || !e) { x <<= 2; y >>= 3; z ^= 0xFF; }\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
    "<div class=\"row\"><span id='a1'>&nbsp;Hello&amp;bye</span></div>\n",
    "{\"model\": \"deepseek-v4\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
    "\"max_tokens\": 128}\n",
    "    // TODO(someone): handle the @Home and #hash cases; a->b, a::b, a?.b ?? c\n",
    "$ ./build/deepinfer serve --port=8080 --model=/models/demo 2>&1 | tee log.txt\n",
    "x = [[1, 2], [3, 4]]; y = x[0][1] ** 2 // 3 % 7; z = {'k': (1,)}\n"};

constexpr std::string_view kEmoji[] = {
    "🦀", "😀",    "👍",           "👍🏽",           "❤️",          "🎉",  "🚀",  "🔥",
    "😂",    "🤔", "🙏🏿",    "👨‍👩‍👧", "🏳️‍🌈",  "🇺🇸", "🇯🇵", "✨",
    "☕",    "⚡",    "🧑‍💻", "😵‍💫",        "👩🏻‍🔬", "🐍",  "🍣",  "🌍"};

constexpr std::string_view kMixed[] = {
    "Привет, мир! Как дела?",          "Ελληνικά γράμματα: αβγ ΔΕΖ",
    "مرحبا بالعالم، كيف حالك؟",        "שָׁלוֹם עוֹלָם",
    "नमस्ते दुनिया, क्या हाल है?",          "สวัสดีชาวโลก ภาษาไทย",
    "안녕하세요 세계 여러분",          "こんにちは、世界！カタカナ",
    "Hello мир 世界 κόσμος عالم",      "Tiếng Việt có dấu: Hà Nội, Đà Nẵng",
    "Ça va? Größe, Straße, œuvre, ﬁn", "ǅungla ǈjudi ǋnjiva"};

constexpr std::string_view kCombining[] = {"e\xCC\x81",
                                           "a\xCC\x88",
                                           "n\xCC\x83",
                                           "o\xCC\x82\xCC\x81",
                                           "Z\xCD\xA7\xCC\x90\xCC\x9F",
                                           "\xC3\xA9\xCC\x81",
                                           "i\xCC\x87",
                                           "u\xCC\x8A\xCC\xA3",
                                           "\xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7",
                                           "\xD8\xA8\xD9\x8E\xD9\x91"};

constexpr std::string_view kWhitespace[] = {
    " ",        "  ",           "   ",          "\t",     "\t\t",     "\n",
    "\n\n",     "\n\n\n",       "\r\n",         " \n",    "\n ",      "  \n  ",
    "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", " \t \n", "        ", "\r\n\r\n"};

constexpr std::string_view kPunctUnicode[] = {"。", "，", "「", "」", "！", "？", "、", "《", "》",
                                              "·",  "¿",  "¡",  "§",  "©",  "®",  "°",  "±",  "€",
                                              "£",  "¥",  "→",  "∑",  "∞",  "≤",  "½",  "™"};

void AppendRange(Rng& rng, uint32_t lo, uint32_t hi, size_t count, std::string* out) {
  for (size_t i = 0; i < count; ++i) AppendCodePoint(lo + rng.Uniform(hi - lo + 1), out);
}

void AppendSentence(Rng& rng, std::string* out) {
  const size_t n = 4 + rng.Uniform(14);
  for (size_t i = 0; i < n; ++i) {
    std::string_view w = rng.Pick(kWords);
    if (i == 0 && w[0] >= 'a' && w[0] <= 'z') {
      out->push_back(static_cast<char>(w[0] - 'a' + 'A'));
      out->append(w.substr(1));
    } else {
      out->append(w);
    }
    if (rng.Uniform(8) == 0) out->append(rng.Pick(kPunct));
    if (i + 1 < n) out->push_back(' ');
  }
  out->append(rng.Uniform(4) == 0 ? "?" : ".");
}

void AppendDigits(Rng& rng, std::string* out) {
  switch (rng.Uniform(6)) {
    case 0:
    case 1: {
      const size_t n = 1 + rng.Uniform(20);
      for (size_t i = 0; i < n; ++i) out->push_back(static_cast<char>('0' + rng.Uniform(10)));
      break;
    }
    case 2:
      out->append(std::to_string(rng.Next() % 100000) + "." + std::to_string(rng.Uniform(1000)));
      break;
    case 3:  // Arabic-Indic digits
      AppendRange(rng, 0x0660, 0x0669, 1 + rng.Uniform(8), out);
      break;
    case 4:  // fullwidth digits
      AppendRange(rng, 0xFF10, 0xFF19, 1 + rng.Uniform(8), out);
      break;
    default:
      out->append("²³¼ Ⅻ 1,234,567 v2.0.1 2026-11-29T23:59:59Z");
      break;
  }
}

void AppendCjk(Rng& rng, std::string* out) {
  switch (rng.Uniform(5)) {
    case 0:
    case 1:  // common ideographs, inside the DeepSeek class [一-龥]
      AppendRange(rng, 0x4E00, 0x9FA5, 1 + rng.Uniform(12), out);
      break;
    case 2:  // hiragana / katakana
      AppendRange(rng, 0x3041, 0x3096, 1 + rng.Uniform(6), out);
      AppendRange(rng, 0x30A1, 0x30FA, 1 + rng.Uniform(6), out);
      break;
    case 3:  // outside the class: U+9FA6.., extension A, Hangul syllables
      AppendRange(rng, 0x9FA6, 0x9FFF, 1 + rng.Uniform(3), out);
      AppendRange(rng, 0x3400, 0x4DBF, 1 + rng.Uniform(3), out);
      AppendRange(rng, 0xAC00, 0xD7A3, 1 + rng.Uniform(4), out);
      break;
    default:
      out->append("中文English混合123，这是一个测试。");
      break;
  }
}

}  // namespace

std::vector<std::string> GenerateCorpus(size_t min_total_bytes, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < min_total_bytes) {
    std::string doc;
    const size_t target = 200 + rng.Uniform(1800);
    while (doc.size() < target) {
      switch (rng.Uniform(12)) {
        case 0:
        case 1:
        case 2:
          AppendSentence(rng, &doc);
          break;
        case 3:
          doc.append(rng.Pick(kCode));
          break;
        case 4:
          AppendCjk(rng, &doc);
          break;
        case 5:
          doc.append(rng.Pick(kEmoji));
          break;
        case 6:
          doc.append(rng.Pick(kMixed));
          break;
        case 7:
          doc.append(rng.Pick(kWords));
          doc.append(rng.Pick(kCombining));
          break;
        case 8:
          AppendDigits(rng, &doc);
          break;
        case 9:
          doc.append(rng.Pick(kPunctUnicode));
          break;
        default:
          break;
      }
      doc.append(rng.Pick(kWhitespace));
    }
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

std::vector<std::string> GenerateEnglishProse(size_t min_total_bytes, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < min_total_bytes) {
    std::string doc;
    const size_t target = 500 + rng.Uniform(1500);
    while (doc.size() < target) {
      AppendSentence(rng, &doc);
      doc.append(rng.Uniform(6) == 0 ? "\n\n" : " ");
    }
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace deepinfer::tokenizer_testing
