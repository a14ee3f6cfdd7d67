#include "store/auth.hpp"

#include <cstring>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "core/check.hpp"

namespace kizuna::store::auth {
namespace {

constexpr std::string_view kClientLabel = "kizuna-store/1 client";
constexpr std::string_view kServerLabel = "kizuna-store/1 server";

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no OpenSSL error recorded";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

wire::Mac proof(std::string_view label, std::string_view token, const wire::Nonce& server_nonce,
                const wire::Nonce& client_nonce) {
  std::uint8_t message[64 + wire::kNonceBytes * 2];
  std::size_t n = 0;
  std::memcpy(message, label.data(), label.size());
  n += label.size();
  std::memcpy(message + n, server_nonce.data(), server_nonce.size());
  n += server_nonce.size();
  std::memcpy(message + n, client_nonce.data(), client_nonce.size());
  n += client_nonce.size();

  wire::Mac mac{};
  unsigned int mac_bytes = 0;
  // HMAC accepts an empty key only with a non-null pointer.
  static const unsigned char kEmpty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmpty) : token.data();
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), message, n, mac.data(), &mac_bytes) ==
          nullptr ||
      mac_bytes != mac.size())
    KIZUNA_THROW(ErrorCode::SystemError, "HMAC-SHA256 failed: ", openssl_error());
  return mac;
}

}  // namespace

wire::Nonce random_nonce() {
  wire::Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
    KIZUNA_THROW(ErrorCode::SystemError,
                 "cannot draw a random nonce (RAND_bytes): ", openssl_error());
  return nonce;
}

wire::Mac client_proof(std::string_view token, const wire::Nonce& server_nonce,
                       const wire::Nonce& client_nonce) {
  return proof(kClientLabel, token, server_nonce, client_nonce);
}

wire::Mac server_proof(std::string_view token, const wire::Nonce& server_nonce,
                       const wire::Nonce& client_nonce) {
  return proof(kServerLabel, token, server_nonce, client_nonce);
}

bool equal(const wire::Mac& a, const wire::Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kizuna::store::auth
