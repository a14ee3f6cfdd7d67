// store/auth.hpp: the HMAC-SHA256 challenge-response of a store connection.
//
// When a token is set, the server opens every connection with a fresh random
// nonce; the client answers with its own nonce and
//   client proof = HMAC-SHA256(token, "kizuna-store/1 client" || server nonce || client nonce)
// and the server, once it has checked that, proves itself back with
//   server proof = HMAC-SHA256(token, "kizuna-store/1 server" || server nonce || client nonce).
// The token never crosses the wire; the direction labels stop a proof from
// being reflected back; a recorded answer is useless on a new connection,
// whose server nonce differs. Proofs are compared in constant time.
// OpenSSL's libcrypto does the cryptography (RAND_bytes, HMAC).
//
// Thread-safe (no state).
#pragma once

#include <string_view>

#include "store/wire.hpp"

namespace kizuna::store::auth {

// A nonce from the OS's cryptographic generator; throws SystemError if
// OpenSSL cannot seed it.
wire::Nonce random_nonce();

wire::Mac client_proof(std::string_view token, const wire::Nonce& server_nonce,
                       const wire::Nonce& client_nonce);
wire::Mac server_proof(std::string_view token, const wire::Nonce& server_nonce,
                       const wire::Nonce& client_nonce);

// Constant-time comparison (CRYPTO_memcmp).
bool equal(const wire::Mac& a, const wire::Mac& b);

}  // namespace kizuna::store::auth
