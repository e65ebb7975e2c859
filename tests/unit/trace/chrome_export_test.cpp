// Chrome JSON export: what is written reads back into the same slices and flows.
#include <gtest/gtest.h>

#include <sstream>

#include "trace/export/chrome_export.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

TEST(ChromeExport, RoundTripsSlicesFlowsAndNames) {
  Model model;
  ModelBuilder builder(model);
  const TrackId track = builder.track(0, TrackKind::kThread, "1", "1");
  builder.track_info(track).name = "main \"quoted\"";
  const TrackId other = builder.track(0, TrackKind::kThread, "1", "2");
  builder.track_info(other).name = "io";
  builder.add_slice(track, 1000, 5001, builder.intern("outer\n"), builder.intern("cat"));
  builder.add_slice(track, 2000, 3000, builder.intern("inner"), 0);
  builder.add_slice(other, 4000, 4500, builder.intern("read"), 0);
  builder.add_flow(builder.intern("req"), track, 2500, other, 4100, false);
  builder.add_instant(track, 1500, builder.intern("tick"));
  builder.finish();
  std::ostringstream out;
  write_chrome_json(model, out);
  std::string text = out.str();

  Model back;
  ModelBuilder back_builder(back);
  import_chrome_json(text, "export.json", back_builder, 0);
  back_builder.finish();
  EXPECT_TRUE(back.stats.all_zero());
  ASSERT_EQ(back.slices.size(), 3u);
  for (SliceId id = 0; id < 3; ++id) {
    EXPECT_EQ(back.slice_name(id), model.slice_name(id));
    EXPECT_EQ(back.slices.start_ns[id], model.slices.start_ns[id]);
    EXPECT_EQ(back.slices.end_ns[id], model.slices.end_ns[id]);
    EXPECT_EQ(back.slices.depth[id], model.slices.depth[id]);
  }
  EXPECT_EQ(back.tracks[back.slices.track[0]].name, "main \"quoted\"");
  ASSERT_EQ(back.flows.size(), 1u);
  EXPECT_EQ(back.slice_name(back.flows.from_slice[0]), "inner");
  EXPECT_EQ(back.slice_name(back.flows.to_slice[0]), "read");
  EXPECT_EQ(back.instants.size(), 1u);
}

}  // namespace
}  // namespace loupe::trace
