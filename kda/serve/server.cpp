#include "kda/serve/server.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "kda/faults.hpp"
#include "kda/serve/handoff.hpp"
#include "kda/serve/interpreter_lock.hpp"
#include "kda/serve/transfer.hpp"
#include "loupe/error.hpp"
#include "loupe/trace.hpp"

namespace kda::serve {

namespace {

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// Finished layers on their way from the prefill worker to the transfer thread.
struct LayerWork {
  int64_t layer = 0;
  uint64_t flow_id = 0;
  std::vector<model::LayerState> states;  // one per request
};

class LayerQueue {
 public:
  // The consumer is notified after the mutex is released: notified while it is held, it wakes,
  // finds the mutex taken and blocks again until the producer is scheduled to release it, which on
  // a loaded machine is milliseconds of a queued layer nobody can take (the layer queue's blocked
  // residence under two busy loops: median 26 ms a run with the notify inside the lock).
  void push(LayerWork work) {
    bool notify = false;
    {
      std::lock_guard lock(mutex_);
      // Planted fault queue_wakeup_inverted: "wake the consumer only when it can be waiting" with
      // the test inverted: it is woken only when the queue already held an item, so a layer
      // pushed onto an empty queue waits for the next push (or close()) before it is transferred.
      const bool was_empty = items_.empty();
      items_.push_back(std::move(work));
      // The consumer's times first, the push's time after them: the read (tens of microseconds)
      // delays the wake-up, and is the measurement's, not the queue's.
      const std::optional<ConsumerTimes> consumer_times =
          residence_.consumer_waiting() ? read_consumer_times(consumer_thread_) : std::nullopt;
      residence_.pushed(now_ns(), consumer_times);
      notify = !fault("queue_wakeup_inverted") || !was_empty;
    }
    if (notify) changed_.notify_one();
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    changed_.notify_one();
  }
  // Called by one consumer thread.
  std::optional<LayerWork> pop() {
    std::unique_lock lock(mutex_);
    consumer_thread_ = current_consumer_thread();
    const bool waits = !closed_ && items_.empty();
    if (waits) residence_.consumer_waits(now_ns());
    // Planted fault queue_consumer_polls: the consumer looks at the queue every 2 ms instead of
    // waiting for a notification ("cheaper than a condition variable"): it sleeps through each
    // notify, and a layer pushed meanwhile waits for the next look.
    if (fault("queue_consumer_polls")) {
      while (!closed_ && items_.empty()) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        lock.lock();
      }
    }
    changed_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    residence_.taken(now_ns(), waits ? read_consumer_times(consumer_thread_) : std::nullopt);
    LayerWork work = std::move(items_.front());
    items_.pop_front();
    return work;
  }
  // REQUIRES: the producer and the consumer have finished.
  HandoffStats residence() {
    std::lock_guard lock(mutex_);
    return residence_.stats();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<LayerWork> items_;
  bool closed_ = false;
  HandoffResidence residence_;      // guarded by mutex_
  ConsumerThread consumer_thread_;  // guarded by mutex_; the thread in pop()
};

// The first exception of any thread, rethrown by run_server after every thread joined.
class FirstError {
 public:
  void record(std::exception_ptr error) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = error;
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void rethrow() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

std::atomic<uint64_t> g_run_counter{0};

std::vector<int32_t> prompts_of(const ServeOptions& options) {
  if (options.prompts.empty()) {
    return model::generate_prompts(options.requests, options.prompt_len, options.model.vocab,
                                   options.seed);
  }
  return options.prompts;
}

}  // namespace

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kPrefill:
      return "prefill";
    case Mode::kPrefillTransfer:
      return "prefill+transfer";
    case Mode::kDecode:
      return "decode";
    case Mode::kDisaggregated:
      return "disaggregated";
  }
  return "prefill";
}

Mode parse_mode(std::string_view name) {
  for (Mode mode : {Mode::kPrefill, Mode::kPrefillTransfer, Mode::kDecode, Mode::kDisaggregated}) {
    if (name == mode_name(mode)) return mode;
  }
  throw loupe::Error(loupe::ErrorCode::kUsage,
                     "kda serve: unknown mode '" + std::string(name) + "'",
                     "use prefill, prefill+transfer, decode or disaggregated");
}

void ServeOptions::validate() const {
  model.validate();
  auto require = [](bool condition, const std::string& message) {
    if (!condition) throw loupe::Error(loupe::ErrorCode::kUsage, "kda serve: " + message);
  };
  require(requests >= 1, "--requests must be at least 1, got " + std::to_string(requests));
  require(prompt_len >= 1, "--prompt-len must be at least 1, got " + std::to_string(prompt_len));
  require(new_tokens >= 1, "--new-tokens must be at least 1, got " + std::to_string(new_tokens));
  require(dispatch_wait_us >= 0, "--dispatch-wait-us must not be negative");
  require(bookkeeping_us >= 0, "--bookkeeping-us must not be negative");
  require(switch_interval_us >= 0, "--switch-interval-us must not be negative");
  require(drop_state_layer >= -1 && drop_state_layer < model.layers,
          "--drop-state-layer must name a layer in [0, " + std::to_string(model.layers) +
              "), got " + std::to_string(drop_state_layer));
  require(!swap_requests || requests >= 2, "--swap-requests needs at least 2 requests");
  require(prompts.empty() || static_cast<int64_t>(prompts.size()) == requests * prompt_len,
          "the prompts hold " + std::to_string(prompts.size()) +
              " tokens, expected requests x "
              "prompt_len = " +
              std::to_string(requests * prompt_len));
  const bool transfers = mode == Mode::kPrefillTransfer || mode == Mode::kDisaggregated;
  require(transfers || (drop_state_layer < 0 && !swap_requests),
          "fault injection (--drop-state-layer, --swap-requests) needs a mode with a transfer "
          "(prefill+transfer or disaggregated)");
}

model::Generation serve_colocated(const ServeOptions& options) {
  options.validate();
  const model::Model model(options.model);
  const std::vector<int32_t> prompts = prompts_of(options);
  return model::generate(model, prompts, options.requests, options.prompt_len, options.new_tokens,
                         options.cache_dtype);
}

ServeResult run_server(const ServeOptions& options) {
  options.validate();
  const model::Model model(options.model);
  const model::ModelConfig& config = model.config();
  const int64_t requests = options.requests, tokens = options.prompt_len;
  const int64_t rows = requests * tokens, hidden_width = config.hidden;
  const std::vector<int32_t> prompts = prompts_of(options);
  model::StateCache cache(options.cache_dtype, requests, config.layers, config.head_dim);
  DecodeIntake intake(cache, options.verify_digests);
  InterpreterLock interpreter_lock(std::chrono::microseconds(options.switch_interval_us));
  const bool run_prefill = options.mode != Mode::kDecode;
  const bool run_transfer =
      options.mode == Mode::kPrefillTransfer || options.mode == Mode::kDisaggregated;
  const bool run_decode = options.mode == Mode::kDecode || options.mode == Mode::kDisaggregated;
  const uint64_t run_id = g_run_counter.fetch_add(1) + 1;

  model::LayerState zero_state;
  zero_state.recurrent.assign(config.heads * config.head_dim * config.head_dim, 0.0f);
  zero_state.conv.assign((config.conv_width - 1) * config.conv_channels(), 0.0f);

  std::promise<std::vector<float>> first_logits_promise;
  std::shared_future<std::vector<float>> first_logits = first_logits_promise.get_future().share();
  if (!run_prefill) {
    // decode mode: a colocated prefill fills the cache before the clock starts.
    first_logits_promise.set_value(model.prefill(prompts, requests, tokens, cache));
  }

  if (!options.trace_path.empty() && !loupe::trace::start(options.trace_path)) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda serve: cannot record into " + options.trace_path +
                           ": a trace session is already recording",
                       "unset LOUPE_TRACE or drop --trace");
  }

  ServeResult result;
  StageTimes& stages = result.stages;
  FirstError first_error;
  LayerQueue queue;

  // When each finished (steady ns), written by its own thread, read after the joins.
  int64_t prefill_end_ns = 0, transfer_end_ns = 0;
  auto prefill_worker = [&] {
    LOUPE_THREAD_NAME("prefill_worker");
    const int64_t begin = now_ns();
    bool holding = false;
    int64_t lock_wait_ns = 0;
    auto yield_point = [&] { lock_wait_ns += interpreter_lock.yield_if_requested().count(); };
    std::optional<LayerWork> held_states;  // planted fault transfer_push_after_next_attention
    try {
      lock_wait_ns += interpreter_lock.acquire().count();
      holding = true;
      std::vector<float> hidden = model.embed(prompts);
      for (int64_t layer = 0; layer < config.layers; ++layer) {
        LOUPE_ZONE("prefill_layer");
        std::vector<model::LayerState> states;
        {
          LOUPE_ZONE("attention");
          const int64_t start = now_ns();
          model.attention_prefill(layer, requests, tokens, hidden.data(), states);
          stages.attention_s += seconds(now_ns() - start);
        }
        // Planted fault transfer_push_after_moe: the layer's states handed to the transfer thread
        // once the whole layer (attention and MoE) is done, "so that the layer is complete",
        // instead of right after its attention: the transfer no longer overlaps that layer's
        // dispatch wait, and the last layer's transfer runs after prefill.
        const bool push_after_moe = fault("transfer_push_after_moe");
        auto ship_states = [&] {
          // The layer's recurrent states are final once its attention ran: ship them now, while
          // the MoE half of the layer proceeds.
          const uint64_t flow_id = (run_id << 32) | static_cast<uint64_t>(layer + 1);
          LOUPE_FLOW_BEGIN("layer_state", flow_id);
          queue.push(LayerWork{layer, flow_id, std::move(states)});
        };
        // Planted fault transfer_push_after_next_attention (written after the transfer-tail
        // gate): each layer's states held back until the next layer's attention is done ("batch
        // the handoffs"); the last layer's go after the loop, once prefill is done.
        const bool push_late = fault("transfer_push_after_next_attention");
        if (run_transfer && push_late) {
          if (held_states) {
            LOUPE_FLOW_BEGIN("layer_state", held_states->flow_id);
            queue.push(std::move(*held_states));
          }
          held_states = LayerWork{layer, (run_id << 32) | static_cast<uint64_t>(layer + 1),
                                  std::move(states)};
        } else if (run_transfer && !push_after_moe) {
          ship_states();
        }
        yield_point();
        model::MoeBatch batch;
        {
          LOUPE_ZONE("moe_dispatch");
          const int64_t start = now_ns();
          batch = model.moe_dispatch(layer, hidden.data(), rows);
          // The simulated remote counter reports the received-token count once its latency has
          // passed; the dispatch polls it (poll_until says why it sleeps between polls).
          const int64_t counter_ready = now_ns() + options.dispatch_wait_us * 1000;
          const int64_t wait_start = now_ns();
          // Planted fault dispatch_short_wait_keeps_lock: a wait shorter than the switch interval
          // is judged not worth a lock hand-off, comparing microseconds with the interval taken
          // as milliseconds, so every wait is "short" and the dispatch waits holding the lock.
          const bool short_wait = fault("dispatch_short_wait_keeps_lock") &&
                                  options.dispatch_wait_us < options.switch_interval_us * 1000;
          if (options.dispatch_holds_lock || short_wait) {
            poll_until(counter_ready);
          } else {
            interpreter_lock.release();
            holding = false;
            poll_until(counter_ready);
            lock_wait_ns += interpreter_lock.acquire().count();
            holding = true;
          }
          stages.dispatch_wait_s += seconds(now_ns() - wait_start);
          if (batch.received_tokens() != rows * config.top_k) {
            throw loupe::Error(loupe::ErrorCode::kInternal,
                               "kda serve: layer " + std::to_string(layer) + " dispatched " +
                                   std::to_string(batch.received_tokens()) + " tokens, expected " +
                                   std::to_string(rows * config.top_k));
          }
          stages.moe_dispatch_s += seconds(now_ns() - start);
        }
        yield_point();
        {
          LOUPE_ZONE("experts");
          const int64_t start = now_ns();
          model.moe_experts(layer, batch);
          stages.experts_s += seconds(now_ns() - start);
        }
        yield_point();
        {
          LOUPE_ZONE("moe_combine");
          const int64_t start = now_ns();
          model.moe_combine(batch, hidden.data());
          stages.moe_combine_s += seconds(now_ns() - start);
        }
        if (run_transfer && push_after_moe) ship_states();
        yield_point();
      }
      std::vector<float> last_rows(requests * hidden_width);
      for (int64_t request = 0; request < requests; ++request) {
        std::copy_n(hidden.data() + ((request + 1) * tokens - 1) * hidden_width, hidden_width,
                    last_rows.data() + request * hidden_width);
      }
      first_logits_promise.set_value(model.logits(last_rows.data(), requests));
      if (held_states) {
        LOUPE_FLOW_BEGIN("layer_state", held_states->flow_id);
        queue.push(std::move(*held_states));
      }
      interpreter_lock.release();
      holding = false;
    } catch (...) {
      if (holding) interpreter_lock.release();
      first_error.record(std::current_exception());
      try {
        first_logits_promise.set_exception(std::current_exception());
      } catch (const std::future_error&) {
        // The logits were already set; the error is recorded above.
      }
    }
    queue.close();
    stages.prefill_lock_wait_s = seconds(lock_wait_ns);
    prefill_end_ns = now_ns();
    stages.prefill_s = seconds(prefill_end_ns - begin);
  };

  auto transfer_thread = [&] {
    LOUPE_THREAD_NAME("kv_transfer");
    const int64_t begin = now_ns();
    int64_t lock_wait_ns = 0, bookkeeping_ns = 0;
    try {
      while (std::optional<LayerWork> work = queue.pop()) {
        LOUPE_ZONE("kv_transfer_layer");
        LOUPE_FLOW_END("layer_state", work->flow_id);
        if (work->layer == options.drop_state_layer) continue;  // fault injection
        std::vector<StatePacket> packets(requests);
        // Planted fault transfer_lock_per_layer: the lock taken once per layer, around every
        // request's bookkeeping AND its state copy, instead of once per request's bookkeeping.
        const bool per_layer = fault("transfer_lock_per_layer");
        if (per_layer) lock_wait_ns += interpreter_lock.acquire().count();
        // Planted fault transfer_labels_by_slot: the requests walked newest first, each packet
        // labelled with the loop's slot instead of the request whose state it carries; the
        // digest is computed over that (label, state) pair, so the decode side verifies it.
        const bool newest_first = fault("transfer_labels_by_slot");
        for (int64_t request = 0; request < requests; ++request) {
          const int64_t source = newest_first ? requests - 1 - request : request;
          if (!per_layer) lock_wait_ns += interpreter_lock.acquire().count();
          const int64_t start = now_ns();
          packets[request].request = request;
          packets[request].layer = work->layer;
          packets[request].digest = state_digest(request, work->layer, work->states[source]);
          // The rest of the per-request interpreter work (descriptors, metadata, queue
          // bookkeeping in the Python original) is modelled as a timed hold of the lock: what
          // matters to the incident is how long the lock is held, and a hold that burns no core
          // keeps the measurement about the lock on a shared 2-core machine.
          // Planted fault transfer_long_hold: the bookkeeping holds the lock twice as long.
          const int64_t deadline =
              start + options.bookkeeping_us * 1000 * (fault("transfer_long_hold") ? 2 : 1);
          // Planted fault transfer_lock_per_slice: the bookkeeping gives the lock back and takes
          // it again every 250 us: the same work in ten short holds, each shorter than before.
          if (fault("transfer_lock_per_slice") && !per_layer) {
            for (int64_t slice_end = start + 250000; slice_end < deadline; slice_end += 250000) {
              poll_until(slice_end);
              interpreter_lock.release();
              lock_wait_ns += interpreter_lock.acquire().count();
            }
          }
          poll_until(deadline);
          bookkeeping_ns += now_ns() - start;
          if (!per_layer) interpreter_lock.release();
          packets[request].state = work->states[source];  // the copy, outside the lock
        }
        if (per_layer) interpreter_lock.release();
        if (options.swap_requests) std::swap(packets[0].request, packets[1].request);
        for (StatePacket& packet : packets) intake.receive(std::move(packet));
      }
      intake.finish(zero_state);
    } catch (...) {
      first_error.record(std::current_exception());
      intake.abandon();
    }
    stages.transfer_lock_wait_s = seconds(lock_wait_ns);
    stages.transfer_bookkeeping_s = seconds(bookkeeping_ns);
    transfer_end_ns = now_ns();
    stages.transfer_s = seconds(transfer_end_ns - begin);
  };

  auto decode_worker = [&] {
    LOUPE_THREAD_NAME("decode_worker");
    const int64_t begin = now_ns();
    try {
      if (run_transfer) intake.wait_complete();
      if (first_error.failed()) return;
      const std::vector<float> logits = first_logits.get();
      const int64_t vocab = config.vocab, new_tokens = options.new_tokens;
      model::Generation& generation = result.generation;
      generation.tokens.assign(requests * new_tokens, 0);
      generation.logits.assign(requests * new_tokens * vocab, 0.0f);
      std::vector<int64_t> request_ids(requests);
      for (int64_t request = 0; request < requests; ++request) request_ids[request] = request;
      std::vector<float> step_logits = logits;
      for (int64_t step = 0; step < new_tokens; ++step) {
        if (step > 0) {
          LOUPE_ZONE("decode_step");
          std::vector<int32_t> inputs(requests);
          for (int64_t request = 0; request < requests; ++request) {
            inputs[request] = generation.tokens[request * new_tokens + step - 1];
          }
          step_logits = model.decode_step(inputs, request_ids, cache);
        }
        const std::vector<int32_t> chosen = model::argmax_rows(step_logits, vocab);
        for (int64_t request = 0; request < requests; ++request) {
          generation.tokens[request * new_tokens + step] = chosen[request];
          std::copy_n(step_logits.data() + request * vocab, vocab,
                      generation.logits.data() + (request * new_tokens + step) * vocab);
        }
      }
    } catch (...) {
      first_error.record(std::current_exception());
    }
    stages.decode_s = seconds(now_ns() - begin);
  };

  const int64_t start = now_ns();
  std::vector<std::thread> threads;
  if (run_prefill) threads.emplace_back(prefill_worker);
  if (run_transfer) threads.emplace_back(transfer_thread);
  if (run_decode) threads.emplace_back(decode_worker);
  for (std::thread& thread : threads) thread.join();
  result.wall_s = seconds(now_ns() - start);
  if (run_prefill && run_transfer) {
    stages.transfer_tail_s = seconds(std::max<int64_t>(0, transfer_end_ns - prefill_end_ns));
  }
  if (!options.trace_path.empty()) result.trace_events = loupe::trace::stop();
  first_error.rethrow();

  result.tokens = run_decode ? requests * options.new_tokens : rows;
  result.tokens_per_s = result.wall_s > 0 ? static_cast<double>(result.tokens) / result.wall_s : 0;
  result.states_received = intake.received();
  result.states_verified = intake.verified();
  result.forced_switches = interpreter_lock.forced_switches();
  result.layer_queue = queue.residence();
  return result;
}

std::string result_json(const ServeOptions& options, const ServeResult& result) {
  auto number = [](double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", value);
    return std::string(text);
  };
  const StageTimes& s = result.stages;
  const HandoffStats& q = result.layer_queue;
  std::ostringstream out;
  out << "{\"mode\": \"" << mode_name(options.mode)
      << "\", \"dispatch_holds_lock\": " << (options.dispatch_holds_lock ? "true" : "false")
      << ", \"wall_s\": " << number(result.wall_s)
      << ", \"tokens_per_s\": " << number(result.tokens_per_s) << ", \"tokens\": " << result.tokens
      << ", \"layers\": " << options.model.layers << ", \"requests\": " << options.requests
      << ", \"prompt_len\": " << options.prompt_len << ", \"new_tokens\": " << options.new_tokens
      << ", \"seed\": " << options.seed << ", \"dispatch_wait_us\": " << options.dispatch_wait_us
      << ", \"bookkeeping_us\": " << options.bookkeeping_us << ", \"cache\": \""
      << model::cache_dtype_name(options.cache_dtype) << "\""
      << ", \"w8a8\": " << (options.model.w8a8 ? "true" : "false") << ", \"stages\": {"
      << "\"attention_s\": " << number(s.attention_s)
      << ", \"moe_dispatch_s\": " << number(s.moe_dispatch_s)
      << ", \"dispatch_wait_s\": " << number(s.dispatch_wait_s)
      << ", \"experts_s\": " << number(s.experts_s)
      << ", \"moe_combine_s\": " << number(s.moe_combine_s)
      << ", \"prefill_lock_wait_s\": " << number(s.prefill_lock_wait_s)
      << ", \"prefill_s\": " << number(s.prefill_s) << ", \"transfer_s\": " << number(s.transfer_s)
      << ", \"transfer_bookkeeping_s\": " << number(s.transfer_bookkeeping_s)
      << ", \"transfer_lock_wait_s\": " << number(s.transfer_lock_wait_s)
      << ", \"decode_s\": " << number(s.decode_s) << "}"
      << ", \"states_received\": " << result.states_received
      << ", \"states_verified\": " << result.states_verified
      << ", \"forced_switches\": " << result.forced_switches << ", \"layer_queue\": {"
      << "\"items\": " << q.items << ", \"residence_median_s\": " << number(q.residence_median_s)
      << ", \"residence_p90_s\": " << number(q.residence_p90_s)
      << ", \"residence_max_s\": " << number(q.residence_max_s)
      << ", \"residence_s\": " << number(q.residence_s)
      << ", \"idle_residence_s\": " << number(q.idle_residence_s)
      << ", \"idle_residence_max_s\": " << number(q.idle_residence_max_s)
      << ", \"blocked_residence_s\": " << number(q.blocked_residence_s)
      << ", \"blocked_residence_max_s\": " << number(q.blocked_residence_max_s)
      << ", \"consumer_times_known\": " << (q.consumer_times_known ? "true" : "false") << "}"
      << ", \"trace_events\": " << result.trace_events << "}";
  return out.str();
}

}  // namespace kda::serve
