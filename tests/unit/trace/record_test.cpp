// Recording (include/loupe/trace.hpp, src/trace/record) read back through the binary importer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "loupe/trace.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("loupe_record_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::vector<std::string> slice_names(const Model& model, TrackId track) {
  std::vector<std::string> names;
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (model.slices.track[id] == track) names.emplace_back(model.slice_name(id));
  }
  return names;
}

TrackId find_track(const Model& model, const std::string& name) {
  for (TrackId id = 0; id < model.tracks.size(); ++id) {
    if (model.tracks[id].name == name) return id;
  }
  return kNoTrack;
}

TEST(Record, NothingIsRecordedWhileOff) {
  ASSERT_FALSE(enabled());
  { LOUPE_ZONE("never"); }
  const std::string path = temp_path("off.loupetrace");
  ASSERT_TRUE(start(path));
  EXPECT_EQ(stop(), 0u);
  const Model model = load_traces({path});
  EXPECT_EQ(model.slices.size(), 0u);
  std::filesystem::remove(path);
}

TEST(Record, ZonesInstantsCountersFlowsAndThreadsRoundTrip) {
  const std::string path = temp_path("zones.loupetrace");
  ASSERT_TRUE(start(path));
  EXPECT_FALSE(start(path));  // one session at a time
  std::thread producer([] {
    LOUPE_THREAD_NAME("producer");
    LOUPE_ZONE("prefill_layer");
    {
      LOUPE_ZONE("moe_dispatch");
      LOUPE_INSTANT("dispatched");
      LOUPE_FLOW_BEGIN("kv", 42);
    }
    LOUPE_COUNTER("queue_depth", 3);
  });
  producer.join();
  std::thread consumer([] {
    LOUPE_THREAD_NAME("consumer");
    const std::string dynamic = std::string("kv_transfer_layer_") + std::to_string(7);
    LOUPE_ZONE_DYNAMIC(dynamic);
    LOUPE_FLOW_END("kv", 42);
  });
  consumer.join();
  // producer: 2 zones (4 events), instant, flow begin, counter; consumer: zone (2), flow end
  EXPECT_EQ(stop(), 10u);
  const Model model = load_traces({path});
  const TrackId producer_track = find_track(model, "producer");
  const TrackId consumer_track = find_track(model, "consumer");
  ASSERT_NE(producer_track, kNoTrack);
  ASSERT_NE(consumer_track, kNoTrack);
  EXPECT_EQ(slice_names(model, producer_track),
            (std::vector<std::string>{"prefill_layer", "moe_dispatch"}));
  EXPECT_EQ(slice_names(model, consumer_track), (std::vector<std::string>{"kv_transfer_layer_7"}));
  // Nesting: moe_dispatch is the child of prefill_layer.
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (model.slice_name(id) == "moe_dispatch") {
      ASSERT_NE(model.slices.parent[id], kNoSlice);
      EXPECT_EQ(model.slice_name(model.slices.parent[id]), "prefill_layer");
      EXPECT_EQ(model.slices.depth[id], 1u);
    }
  }
  ASSERT_EQ(model.instants.size(), 1u);
  EXPECT_EQ(model.strings.get(model.instants.name[0]), "dispatched");
  ASSERT_EQ(model.counters.size(), 1u);
  EXPECT_EQ(model.counters.value[0], 3.0);
  ASSERT_EQ(model.flows.size(), 1u);
  EXPECT_EQ(model.slice_name(model.flows.from_slice[0]), "moe_dispatch");
  EXPECT_EQ(model.slice_name(model.flows.to_slice[0]), "kv_transfer_layer_7");
  ASSERT_EQ(model.files.size(), 1u);
  EXPECT_EQ(model.files[0].format, "loupe-binary");
  EXPECT_EQ(model.files[0].clock_domain, "monotonic");
  EXPECT_TRUE(model.stats.all_zero());
  // Timestamps are CLOCK_MONOTONIC ns, ordered within a thread.
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    EXPECT_LE(model.slices.start_ns[id], model.slices.end_ns[id]);
  }
  std::filesystem::remove(path);
}

TEST(Record, StopWhenFullCountsDroppedEvents) {
  const std::string path = temp_path("full.loupetrace");
  Options options;
  options.events_per_thread = 4;
  ASSERT_TRUE(start(path, options));
  std::thread worker([] {
    for (int index = 0; index < 5; ++index) {
      LOUPE_ZONE("step");  // 10 events, 4 kept
    }
  });
  worker.join();
  EXPECT_EQ(stop(), 4u);
  EXPECT_EQ(session_counts().dropped, 6u);
  const Model model = load_traces({path});
  EXPECT_EQ(model.slices.size(), 2u);
  EXPECT_EQ(model.stats.count(Stat::trace_recorder_dropped), 6);
  EXPECT_EQ(model.files[0].dropped_by_recorder, 6u);
  std::filesystem::remove(path);
}

TEST(Record, RingKeepsTheNewestEvents) {
  const std::string path = temp_path("ring.loupetrace");
  Options options;
  options.events_per_thread = 4;
  options.mode = BufferMode::kRing;
  ASSERT_TRUE(start(path, options));
  std::thread worker([] {
    for (int index = 0; index < 3; ++index) {
      const std::string name = "step" + std::to_string(index);
      LOUPE_ZONE_DYNAMIC(name);
    }
  });
  worker.join();
  EXPECT_EQ(stop(), 4u);
  const Model model = load_traces({path});
  std::vector<std::string> names;
  for (SliceId id = 0; id < model.slices.size(); ++id) names.emplace_back(model.slice_name(id));
  EXPECT_EQ(names, (std::vector<std::string>{"step1", "step2"}));
  EXPECT_EQ(model.stats.count(Stat::trace_recorder_dropped), 2);
  std::filesystem::remove(path);
}

TEST(Record, TracedMutexRecordsUncontendedObtainAndRelease) {
  const std::string path = temp_path("mutex.loupetrace");
  TracedMutex mutex("state");
  TracedSharedMutex shared("table");
  ASSERT_TRUE(start(path));
  std::thread worker([&] {
    LOUPE_THREAD_NAME("worker");
    { std::lock_guard lock(mutex); }
    { std::shared_lock lock(shared); }
    EXPECT_TRUE(mutex.try_lock());
    mutex.unlock();
  });
  worker.join();
  stop();
  const Model model = load_traces({path});
  ASSERT_EQ(model.lock_events.size(), 6u);
  int obtains = 0, releases = 0, waits = 0, shared_events = 0;
  for (size_t row = 0; row < model.lock_events.size(); ++row) {
    obtains += model.lock_events.kind[row] == LockEventKind::kObtain;
    releases += model.lock_events.kind[row] == LockEventKind::kRelease;
    waits += model.lock_events.kind[row] == LockEventKind::kWait;
    shared_events += model.lock_events.shared[row];
  }
  EXPECT_EQ(obtains, 3);
  EXPECT_EQ(releases, 3);
  EXPECT_EQ(waits, 0);
  EXPECT_EQ(shared_events, 2);
  EXPECT_NE(find_track(model, "state"), kNoTrack);
  EXPECT_NE(find_track(model, "table"), kNoTrack);
  EXPECT_TRUE(model.tracks[find_track(model, "table")].shared_lock);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loupe::trace
