// Conversion of llama2.c checkpoints (`model.bin` + `tokenizer.bin`) to GGUF and to a Hugging Face
// directory, so that the same weights can be loaded through both of the engine's readers.
#pragma once
#include <string>

namespace slake {

// Writes `gguf_path` (if not empty) and `hf_dir` (if not empty; the directory must exist).
// llama2.c rotates adjacent pairs, as GGUF does; the HF copy gets Q/K rows permuted to the
// rotate-half layout, exactly the inverse of llama.cpp's converter.
void convert_llama2c(const std::string& checkpoint, const std::string& tokenizer, const std::string& gguf_path,
                     const std::string& hf_dir);

}  // namespace slake
