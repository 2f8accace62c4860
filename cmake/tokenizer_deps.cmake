# Link dependencies of loom_tokenizer: Oniguruma (the regex engine of the `tokenizers`
# library) and utf8proc (Unicode properties and normalization data).
find_package(PkgConfig REQUIRED)
pkg_check_modules(LOOM_ONIG REQUIRED IMPORTED_TARGET oniguruma)
pkg_check_modules(LOOM_UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
set(LOOM_TOKENIZER_DEPS PkgConfig::LOOM_ONIG PkgConfig::LOOM_UTF8PROC)
