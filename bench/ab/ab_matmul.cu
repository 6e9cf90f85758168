// lowbit-ab-matmul: the CUDA Matmul of two or more builds of liblowbit.so,
// timed in one process, case by case, in alternation (scripts/ab-gemm).
//
// Each library is loaded with dlopen(RTLD_LOCAL) and driven through the C ABI
// only (lowbit/c/lowbit.h), so builds of different commits run side by side
// on one GPU context: what differs between them is their code, not the
// process, the clocks of the moment or the memory placement. For every weight
// type, shape N x K and batch M, each repetition times every library once
// (CUDA events around only the forward, after an untimed read of a buffer of
// twice L2 that leaves L2 clean), in an order that rotates each repetition;
// the median of each library's repetitions is printed, and its ratio to the
// second library's (the base). A copy of the base's file loaded as a third
// library gives the null ratio: the spread this measurement cannot resolve.
//
// Usage: lowbit-ab-matmul LIB_NEW LIB_BASE [LIB...] [--reps N] [--csv FILE]
//        [--types uint4:g128:zeros,int4:g128,nf4:g128,int2:g128]
//        [--shapes NxK,...] [--m 1,16,...]
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "lowbit/c/lowbit.h"

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// One build of the library, through its C ABI.
struct Library {
  std::string path;
  void* handle = nullptr;
  decltype(&lowbit_matmul_config_init) config_init = nullptr;
  decltype(&lowbit_matmul_create) create = nullptr;
  decltype(&lowbit_matmul_destroy) destroy = nullptr;
  decltype(&lowbit_matmul_transform_weight) transform = nullptr;
  decltype(&lowbit_matmul_forward) forward = nullptr;
  decltype(&lowbit_packed_weight_destroy) weight_destroy = nullptr;
  decltype(&lowbit_last_error) last_error = nullptr;

  template <class F>
  void bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    if (f == nullptr) throw std::runtime_error(path + ": no symbol " + name);
  }

  explicit Library(std::string p) : path(std::move(p)) {
    // RTLD_LOCAL: each library's symbols stay its own; DEEPBIND: its own
    // references bind to its own definitions first.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) throw std::runtime_error(path + ": " + dlerror());
    bind(config_init, "lowbit_matmul_config_init");
    bind(create, "lowbit_matmul_create");
    bind(destroy, "lowbit_matmul_destroy");
    bind(transform, "lowbit_matmul_transform_weight");
    bind(forward, "lowbit_matmul_forward");
    bind(weight_destroy, "lowbit_packed_weight_destroy");
    bind(last_error, "lowbit_last_error");
  }

  void ok(lowbit_status s, const char* what) const {
    if (s != LOWBIT_OK) throw std::runtime_error(path + ": " + what + ": " + last_error());
  }
};

// A weight type as bench gemm spells it: TYPE:gG[:zeros].
struct TypeSpec {
  std::string name;
  lowbit_weight_type type = LOWBIT_WEIGHT_INT4;
  int lo = 0, hi = 0;  // the range of the values handed to transform_weight
  int64_t group = 128;
  bool zeros = false;  // quantized zeros (GPTQ's)
};

TypeSpec parse_type(const std::string& s) {
  TypeSpec t;
  t.name = s;
  const std::string base = s.substr(0, s.find(':'));
  struct Known {
    const char* name;
    lowbit_weight_type type;
    int lo, hi;
  };
  static const Known known[] = {{"int8", LOWBIT_WEIGHT_INT8, -128, 127}, {"int4", LOWBIT_WEIGHT_INT4, -8, 7},
                                {"int2", LOWBIT_WEIGHT_INT2, -2, 1},     {"uint8", LOWBIT_WEIGHT_UINT8, 0, 255},
                                {"uint4", LOWBIT_WEIGHT_UINT4, 0, 15},   {"uint2", LOWBIT_WEIGHT_UINT2, 0, 3},
                                {"nf4", LOWBIT_WEIGHT_NF4, 0, 15},       {"fp4", LOWBIT_WEIGHT_FP4, 0, 15}};
  bool found = false;
  for (const Known& k : known) {
    if (base == k.name) {
      t.type = k.type, t.lo = k.lo, t.hi = k.hi, found = true;
    }
  }
  if (!found) throw std::runtime_error("unknown type '" + base + "' (int8/4/2, uint8/4/2, nf4, fp4)");
  size_t at = s.find(':');
  while (at != std::string::npos) {
    const size_t next = s.find(':', at + 1);
    const std::string part = s.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (part == "zeros") {
      t.zeros = true;
    } else if (part.size() > 1 && part[0] == 'g') {
      t.group = std::stoll(part.substr(1));
    } else {
      throw std::runtime_error("unknown type part '" + part + "' (gN, zeros)");
    }
    at = next;
  }
  return t;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t p = s.find(',', start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint16_t f16_bits(float f) {
  const __half h = __float2half(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

DLTensor host_tensor(void* data, DLDataType dtype, int64_t* shape, int ndim) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

__global__ void read_all(const int4* p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    acc ^= p[i].x ^ p[i].w;
  if (acc == 0x7fffffff) *sink = acc;  // keeps the loads
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  std::string csv_path;
  int reps = 31;
  std::vector<std::string> types = {"uint4:g128:zeros", "int4:g128", "nf4:g128", "int2:g128"};
  std::vector<std::string> shapes = {"4096x4096", "14336x4096", "4096x14336", "8192x8192", "28672x8192", "8192x28672"};
  std::vector<int64_t> ms = {1, 16, 32, 64, 128, 256, 4096};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reps") {
      reps = std::stoi(value());
    } else if (a == "--csv") {
      csv_path = value();
    } else if (a == "--types") {
      types = split(value());
    } else if (a == "--shapes") {
      shapes = split(value());
    } else if (a == "--m") {
      ms.clear();
      for (const std::string& m : split(value())) ms.push_back(std::stoll(m));
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() < 2) {
    std::fprintf(stderr, "usage: lowbit-ab-matmul LIB_NEW LIB_BASE [LIB...] [--reps N] [--csv FILE] [--types T,..] "
                         "[--shapes NxK,..] [--m M,..]\n");
    return 2;
  }
  try {
    std::vector<Library> libs;
    for (const std::string& p : paths) libs.emplace_back(p);
    const size_t nl = libs.size();

    int l2 = 0;
    cuda_ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "L2 size");
    const size_t flush_n = std::max<size_t>(size_t{2} * l2, size_t{256} << 20) / sizeof(int4);
    int4* flush = nullptr;
    int* sink = nullptr;
    cuda_ok(cudaMalloc(&flush, flush_n * sizeof(int4)), "cudaMalloc");
    cuda_ok(cudaMalloc(&sink, sizeof(int)), "cudaMalloc");
    cuda_ok(cudaMemset(flush, 1, flush_n * sizeof(int4)), "cudaMemset");
    cudaEvent_t ev[2];
    for (cudaEvent_t& e : ev) cuda_ok(cudaEventCreate(&e), "cudaEventCreate");
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "properties");
    std::printf("ab-matmul: %s; %zu libraries, %d repetitions a case\n", prop.name, nl, reps);
    for (size_t l = 0; l < nl; ++l) std::printf("  lib %zu: %s\n", l, libs[l].path.c_str());

    FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
    if (csv) {
      std::fprintf(csv, "type,N,K,M");
      for (size_t l = 0; l < nl; ++l) std::fprintf(csv, ",lib%zu_us", l);
      std::fprintf(csv, "\n");
    }
    std::printf("%-18s %6s %6s %5s %9s %9s %9s", "type", "N", "K", "M", "base us", "new us", "new/base");
    for (size_t l = 2; l < nl; ++l) std::printf(" %7s%zu", "lib/b", l);
    std::printf("\n");

    const int64_t max_m = *std::max_element(ms.begin(), ms.end());
    for (const std::string& shape : shapes) {
      const size_t x = shape.find('x');
      const int64_t N = std::stoll(shape.substr(0, x)), K = std::stoll(shape.substr(x + 1));
      std::vector<uint16_t> a_host(static_cast<size_t>(max_m * K));
      for (size_t i = 0; i < a_host.size(); ++i)
        a_host[i] = f16_bits(static_cast<float>(static_cast<int64_t>(mix(i) % 2001) - 1000) / 1000.0f);
      void *A = nullptr, *out = nullptr;
      cuda_ok(cudaMalloc(&A, a_host.size() * 2), "cudaMalloc A");
      cuda_ok(cudaMalloc(&out, static_cast<size_t>(max_m * N) * 2), "cudaMalloc out");
      cuda_ok(cudaMemcpy(A, a_host.data(), a_host.size() * 2, cudaMemcpyHostToDevice), "copy A");

      for (const std::string& ts : types) {
        const TypeSpec t = parse_type(ts);
        const int64_t G = K / t.group;
        std::vector<uint8_t> w(static_cast<size_t>(N * K)), z(static_cast<size_t>(N * G));
        std::vector<uint16_t> s(static_cast<size_t>(N * G));
        const uint64_t span = static_cast<uint64_t>(t.hi - t.lo + 1);
        for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(t.lo + static_cast<int>(mix(i * 3) % span));
        for (size_t i = 0; i < s.size(); ++i) {
          s[i] = f16_bits(0.005f + 0.01f * static_cast<float>(mix(i * 5 + 1) & 0xffff) / 65535.0f);
          z[i] = static_cast<uint8_t>(t.lo + static_cast<int>(mix(i * 7 + 2) % span));
        }
        int64_t w_shape[2] = {N, K}, g_shape[2] = {N, G};
        const bool is_signed = t.lo < 0;
        DLTensor wt = host_tensor(w.data(), {static_cast<uint8_t>(is_signed ? kDLInt : kDLUInt), 8, 1}, w_shape, 2);
        DLTensor st = host_tensor(s.data(), {kDLFloat, 16, 1}, g_shape, 2);
        DLTensor zt = host_tensor(z.data(), {static_cast<uint8_t>(is_signed ? kDLInt : kDLUInt), 8, 1}, g_shape, 2);

        // Every library packs its weight at once (packing is host work).
        std::vector<lowbit_matmul*> mm(nl, nullptr);
        std::vector<lowbit_packed_weight*> pw(nl, nullptr);
        std::vector<std::future<void>> pending;
        for (size_t l = 0; l < nl; ++l) {
          pending.push_back(std::async(std::launch::async, [&, l] {
            const Library& L = libs[l];
            lowbit_matmul_config c;
            L.config_init(&c);
            c.M = ms.data();
            c.num_M = ms.size();
            c.N = N;
            c.K = K;
            c.W_dtype = t.type;
            c.group_size = t.group;
            c.with_scaling = 1;
            c.with_zeros = t.zeros;
            c.zeros_mode = LOWBIT_ZEROS_QUANTIZED;
            L.ok(L.create(&c, {kDLCUDA, 0}, &mm[l]), "lowbit_matmul_create");
            L.ok(L.transform(mm[l], &wt, &st, t.zeros ? &zt : nullptr, nullptr, nullptr, &pw[l]),
                 "lowbit_matmul_transform_weight");
          }));
        }
        for (auto& f : pending) f.get();
        cuda_ok(cudaDeviceSynchronize(), "upload");

        for (int64_t M : ms) {
          int64_t a_shape[2] = {M, K}, o_shape[2] = {M, N};
          DLTensor at{}, ot{};
          at.data = A, at.device = {kDLCUDA, 0}, at.ndim = 2, at.dtype = {kDLFloat, 16, 1}, at.shape = a_shape;
          ot.data = out, ot.device = {kDLCUDA, 0}, ot.ndim = 2, ot.dtype = {kDLFloat, 16, 1}, ot.shape = o_shape;
          auto call = [&](size_t l) { libs[l].ok(libs[l].forward(mm[l], &at, pw[l], &ot, nullptr), "forward"); };
          for (int w_i = 0; w_i < 3; ++w_i) {
            for (size_t l = 0; l < nl; ++l) call(l);
          }
          std::vector<std::vector<double>> us(nl);
          for (int r = 0; r < reps; ++r) {
            for (size_t j = 0; j < nl; ++j) {
              const size_t l = (j + static_cast<size_t>(r)) % nl;
              read_all<<<4 * prop.multiProcessorCount, 512>>>(flush, flush_n, sink);
              cuda_ok(cudaEventRecord(ev[0]), "event");
              call(l);
              cuda_ok(cudaEventRecord(ev[1]), "event");
              cuda_ok(cudaEventSynchronize(ev[1]), "event sync");
              float ms_elapsed = 0;
              cuda_ok(cudaEventElapsedTime(&ms_elapsed, ev[0], ev[1]), "elapsed");
              us[l].push_back(1e3 * ms_elapsed);
            }
          }
          std::vector<double> med(nl);
          for (size_t l = 0; l < nl; ++l) med[l] = median(us[l]);
          std::printf("%-18s %6lld %6lld %5lld %9.2f %9.2f %9.3f", t.name.c_str(), static_cast<long long>(N),
                      static_cast<long long>(K), static_cast<long long>(M), med[1], med[0], med[0] / med[1]);
          for (size_t l = 2; l < nl; ++l) std::printf(" %8.3f", med[l] / med[1]);
          std::printf("\n");
          std::fflush(stdout);
          if (csv) {
            std::fprintf(csv, "%s,%lld,%lld,%lld", t.name.c_str(), static_cast<long long>(N),
                         static_cast<long long>(K), static_cast<long long>(M));
            for (size_t l = 0; l < nl; ++l) std::fprintf(csv, ",%.3f", med[l]);
            std::fprintf(csv, "\n");
          }
        }
        cuda_ok(cudaDeviceSynchronize(), "cases");
        for (size_t l = 0; l < nl; ++l) {
          libs[l].weight_destroy(pw[l]);
          libs[l].destroy(mm[l]);
        }
      }
      cuda_ok(cudaFree(A), "cudaFree");
      cuda_ok(cudaFree(out), "cudaFree");
    }
    if (csv) std::fclose(csv);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ab-matmul: %s\n", e.what());
    return 1;
  }
}
