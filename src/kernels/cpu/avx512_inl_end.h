// Closes the AVX-512 code region that avx512_inl.h opened (include it last).
#ifndef __clang__
#pragma GCC diagnostic pop
#endif
#ifdef DEEPINFER_AVX512_EMULATION
#elif defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
