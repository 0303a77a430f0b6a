// SHA-256 against FIPS 180-4's examples (and lengths around the padding's block boundary against
// an independent digest: coreutils' sha256sum over the same bytes), and a file through its mapping.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/status.h"
#include "io/sha256.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(io::sha256_hex("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(io::sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(io::sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(io::sha256_hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// 55, 56 and 64 bytes: the length field fits the last block, needs a second, or the message
// fills a block exactly.
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(io::sha256_hex(std::string(55, 'a').data(), 55),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(io::sha256_hex(std::string(56, 'a').data(), 56),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(io::sha256_hex(std::string(64, 'a').data(), 64),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, FileAndMissingFile) {
  test::TempDir tmp;
  const std::string path = (tmp.path() / "f.bin").string();
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_EQ(io::sha256_file_hex(path),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string empty = (tmp.path() / "empty.bin").string();
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_EQ(io::sha256_file_hex(empty),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  try {
    (void)io::sha256_file_hex((tmp.path() / "absent.bin").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3
