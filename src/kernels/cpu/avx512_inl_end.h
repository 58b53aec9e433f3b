// Closes the AVX-512 code region that avx512_inl.h opened (include it last).
#pragma GCC diagnostic pop
#ifndef DEEPINFER_AVX512_EMULATION
#pragma GCC pop_options
#endif
