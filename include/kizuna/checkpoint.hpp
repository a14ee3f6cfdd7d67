// kizuna/checkpoint.hpp: named tensors saved to and restored from one file,
// written once for the whole data-parallel job.
//
// A Checkpoint is an ordered set of named entries, each a typed array
// (dtype, count, bytes) copied in with put() and out with get(): the flat
// parameter buffer, the optimiser's moments, the step counter...
//
// Saving is collective: save(comm, path, root) writes the file on rank
// `root` only, while the other ranks wait for it (a broadcast of root's
// outcome acts as the barrier), so that every rank returns once the file is
// complete, and every rank throws when root's write failed. Loading reads
// the file on every rank (a shared file system, or a copy per machine);
// load(comm, path) also checks that every rank read the same bytes.
//
// The write is atomic: the bytes go to a temporary file in the same
// directory ("<path>.tmp.<pid>"), which is fsync'ed and renamed over
// `path`, and the directory is fsync'ed; a crash leaves either the old file
// or the new one, never a mix.
//
// File format (little-endian, version 1):
//   header   magic "KZCKPT\r\n" (8 bytes), version u32, entry count u32,
//            payload bytes u64
//   payload  per entry: name length u32, name bytes, dtype u8, count u64,
//            data (count * size_of(dtype) bytes)
//   trailer  CRC-32C u32 of header and payload
// Reading checks all of it before returning anything: a wrong magic or
// version, a size that disagrees with the file's length, an entry that
// overruns the payload, or a wrong checksum is an InvalidArgument saying
// which, so a truncated or corrupt file is never half-loaded. Files are
// refused above 2^40 bytes and names above 4 KiB.
//
// Errors: InvalidArgument as above and for a missing entry or a get() of
// the wrong dtype or count; SystemError (with errno's text and the path)
// when the OS refuses to open, write, fsync or rename; Mismatch when ranks
// loaded different files.
//
// A value type; not thread-safe (use one per thread, or lock).
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kizuna {

class Checkpoint {
 public:
  // Adds or replaces entry `name`: a copy of count elements at data.
  void put(const std::string& name, const void* data, std::size_t count, DataType dtype);
  void put_int(const std::string& name, std::int64_t value) {
    put(name, &value, 1, DataType::Int64);
  }

  bool contains(const std::string& name) const;
  // Entry names in insertion order.
  std::vector<std::string> names() const;
  DataType dtype(const std::string& name) const;
  std::size_t count(const std::string& name) const;
  // Copies entry `name` to dst; InvalidArgument unless it exists with this
  // dtype and count.
  void get(const std::string& name, void* dst, std::size_t count, DataType dtype) const;
  std::int64_t get_int(const std::string& name) const {
    std::int64_t v = 0;
    get(name, &v, 1, DataType::Int64);
    return v;
  }

  // The file's bytes, and back (the format above).
  std::vector<std::uint8_t> serialize() const;
  static Checkpoint deserialize(const std::vector<std::uint8_t>& bytes,
                                const std::string& source = "checkpoint");

  // Local: an atomic write of this rank's checkpoint, and a read.
  void write_file(const std::string& path) const;
  static Checkpoint read_file(const std::string& path);

  // Collective: rank `root` writes its checkpoint (the others' are ignored);
  // every rank returns when the file is complete, or throws root's error.
  void save(Communicator& comm, const std::string& path, int root = 0) const;
  // Collective: every rank reads `path`; Mismatch unless all read the same.
  static Checkpoint load(Communicator& comm, const std::string& path);

 private:
  struct Entry {
    std::string name;
    DataType dtype = DataType::UInt8;
    std::size_t count = 0;
    std::vector<std::uint8_t> data;
  };
  const Entry& find(const std::string& name) const;

  std::vector<Entry> entries_;                           // in the order put
  std::unordered_map<std::string, std::size_t> index_;  // name -> entries_ position
};

}  // namespace kizuna
