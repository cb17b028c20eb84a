// reshard/ext/svg.hpp: pictures of layouts and plans, as SVG text, with no dependency.
//
// For looking at a layout or a plan (the CLI's --svg, Jupyter's _repr_svg_, the docs):
//   layout_svg(l)                  each rank's box of the tensor, coloured by rank; replicated
//                                  boxes hatched and labelled with all their owners
//   plan_svg(p)                    the target layout, each target box cut into the pieces it
//                                  receives, coloured by sender; local copies hatched with a
//                                  dashed outline; the bytes in the legend
//   check_plan_svg(s, d, xs, r)    the same for any list of transfers, with the holes and the
//                                  doubly covered boxes of the check `r` drawn in red
//
// Two dims of the tensor are drawn (rows and columns; svg_options::row_dim / col_dim, by default
// the first two dims with extent > 1, or the last two). The other dims become small multiples:
// one panel per distinct slice of them. Boxes are drawn to scale along each axis, on a canvas of
// a fixed width; very long or wide tensors are drawn with a capped aspect ratio. At most
// max_boxes boxes and max_panels panels are drawn: the picture says when it shows fewer.
// Colours come from a fixed palette of 20, by global rank (rank % 20); red is kept for problems.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/check_plan.hpp"
#include "reshard/layout.hpp"
#include "reshard/partition.hpp"
#include "reshard/plan.hpp"

namespace reshard {

/// What to draw and how large.
struct svg_options {
  int row_dim = -1;              ///< the dim drawn downwards (-1: the default choice)
  int col_dim = -1;              ///< the dim drawn rightwards (-1: the default choice)
  double width = 600;            ///< width of the drawing area in px (the legend below it)
  std::size_t max_boxes = 1000;  ///< boxes (or pieces) drawn at most
  std::size_t max_panels = 16;   ///< panels (slices of the other dims) drawn at most
  index_t element_bytes = 1;     ///< bytes per element, for the figures of plans
};

namespace detail::svg {

// Distinguishable light and medium colours, none of them red (red marks problems).
inline constexpr const char* palette[] = {
    "#4e79a7", "#f28e2b", "#59a14f", "#edc948", "#b07aa1", "#76b7b2", "#9c755f", "#bab0ac",
    "#86bcb6", "#ffbe7d", "#8cd17d", "#b6992d", "#499894", "#d4a6c8", "#a0cbe8", "#f1ce63",
    "#79706e", "#d7b5a6", "#9d7660", "#3b6e8f"};
inline constexpr std::size_t palette_size = sizeof(palette) / sizeof(palette[0]);
inline constexpr const char* problem_red = "#ff0000";

inline const char* colour_of(index_t rank) {
  return palette[static_cast<std::size_t>(rank < 0 ? 0 : rank) % palette_size];
}

// Text for XML character data and attribute values.
inline std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // control characters are not allowed in XML 1.0
        out += static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' ? '?' : c;
    }
  }
  return out;
}

inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  std::string s = b;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// Ranks ascending as runs: "0-3,8,10-11"; at most `max_runs` runs, then ",...". (The CLI's
// format_ranks too.)
inline std::string ranks_text(const std::vector<index_t>& r, std::size_t max_runs = static_cast<std::size_t>(-1)) {
  std::string s;
  std::size_t runs = 0;
  for (std::size_t i = 0; i < r.size();) {
    std::size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (runs++ == max_runs) return s + ",...";
    if (!s.empty()) s += ',';
    s += std::to_string(r[i]);
    if (j > i) s += (j == i + 1 ? "," : "-") + std::to_string(r[j]);
    i = j + 1;
  }
  return s;
}

inline std::string bytes_text(index_t b) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) v /= 1024, ++u;
  return (u == 0 ? std::to_string(b) : num(v)) + " " + units[u];
}

struct rect {
  double x = 0, y = 0, w = 0, h = 0;
};

// The panels of a picture: which two dims are drawn, and one panel per slice of the others.
class picture {
 public:
  // `bounds`: per dim, the slice offsets whose union cuts the other dims into panels.
  picture(const index_list& shape, const svg_options& o, const std::vector<std::vector<index_list>>& bounds)
      : shape_(shape), o_(o) {
    const int n = static_cast<int>(shape.size());
    row_ = o.row_dim, col_ = o.col_dim;
    if (row_ < 0 || col_ < 0 || row_ >= n || col_ >= n || row_ == col_) {
      std::vector<int> big;
      for (int i = 0; i < n; ++i)
        if (shape[static_cast<std::size_t>(i)] > 1) big.push_back(i);
      if (big.size() >= 2) row_ = big[0], col_ = big[1];
      else if (n >= 2) row_ = n - 2, col_ = n - 1;
      else row_ = -1, col_ = n - 1;  // a 1-d tensor is one row; a 0-d one a single box
    }
    rows_ = extent(row_), cols_ = extent(col_);
    for (int i = 0; i < n; ++i) {
      if (i == row_ || i == col_) continue;
      other_.push_back(static_cast<std::size_t>(i));
      std::vector<index_t> cut{0, shape[static_cast<std::size_t>(i)]};
      for (const auto& b : bounds)
        for (index_t v : b[static_cast<std::size_t>(i)]) cut.push_back(v);
      std::sort(cut.begin(), cut.end());
      cut.erase(std::unique(cut.begin(), cut.end()), cut.end());
      cuts_.push_back(std::move(cut));
    }
    // the panels: an odometer over the slices of the other dims, the first max_panels of them
    total_panels_ = 1;
    for (const auto& c : cuts_) total_panels_ *= static_cast<double>(c.size() > 1 ? c.size() - 1 : 1);
    std::vector<std::size_t> k(cuts_.size(), 0);
    const std::size_t cap = std::max<std::size_t>(1, o.max_panels);
    for (bool more = true; more && panels_.size() < cap;) {
      std::vector<std::pair<index_t, index_t>> p;
      for (std::size_t d = 0; d < cuts_.size(); ++d)
        p.push_back(cuts_[d].size() > 1 ? std::pair{cuts_[d][k[d]], cuts_[d][k[d] + 1]} : std::pair{index_t{0}, index_t{0}});
      panels_.push_back(std::move(p));
      more = false;  // an odometer, the last dim fastest
      for (std::size_t d = cuts_.size(); d-- > 0 && !more;) {
        if (k[d] + 2 < cuts_[d].size()) ++k[d], more = true;
        else k[d] = 0;
      }
    }
    // geometry: up to four panels a row; a panel keeps the tensor's aspect, capped at 8:1
    per_row_ = std::min<std::size_t>(panels_.size(), 4);
    const double gap = 14, full = o.width > 50 ? o.width : 600;
    const double cell = (full - gap * static_cast<double>(per_row_ - 1)) / static_cast<double>(per_row_);
    const double r = static_cast<double>(std::max<index_t>(rows_, 1)), c = static_cast<double>(std::max<index_t>(cols_, 1));
    cell_ = cell, pw_ = cell, ph_ = cell;
    if (r < c) ph_ = std::max(cell * r / c, cell / 8);
    if (c < r) pw_ = std::max(cell * c / r, cell / 8);
    if (row_ < 0) ph_ = std::max(24.0, cell / 8);
    title_h_ = other_.empty() ? 0 : 16;
    gap_ = gap;
  }

  std::size_t panels() const { return panels_.size(); }
  double total_panels() const { return total_panels_; }
  double width() const { return margin * 2 + std::max(o_.width > 50 ? o_.width : 600, 360.0); }
  double panels_height() const {
    const std::size_t lines = (panels_.size() + per_row_ - 1) / per_row_;
    return static_cast<double>(lines) * (ph_ + title_h_ + gap_);
  }
  int row_dim() const { return row_; }
  int col_dim() const { return col_; }

  // The drawing area of panel p, given the top of the panels.
  rect area(std::size_t p, double top) const {
    const auto col = static_cast<double>(p % per_row_), line = static_cast<double>(p / per_row_);
    return {margin + col * (cell_ + gap_), top + line * (ph_ + title_h_ + gap_) + title_h_, pw_, ph_};
  }

  // "dim 0 [0:2], dim 3 [4:8]": the slice panel p shows.
  std::string panel_title(std::size_t p) const {
    std::string s;
    for (std::size_t d = 0; d < other_.size(); ++d) {
      if (!s.empty()) s += ", ";
      s += "dim " + std::to_string(other_[d]) + " [" + std::to_string(panels_[p][d].first) + ":" +
           std::to_string(panels_[p][d].second) + "]";
    }
    return s;
  }

  // Does box b meet panel p (its other dims overlap the panel's slice)?
  bool meets(std::size_t p, const box& b) const {
    for (std::size_t d = 0; d < other_.size(); ++d) {
      const index_t lo = b.offset[other_[d]], hi = lo + b.extent[other_[d]];
      const auto [plo, phi] = panels_[p][d];
      if (phi > plo && (hi <= plo || lo >= phi)) return false;
      if (phi == plo && hi <= lo) return false;
    }
    return volume2(b) > 0;
  }

  // The rectangle of box b's two drawn dims inside `a` (the area standing for box `outer`).
  rect place(const rect& a, const box& outer, const box& b) const {
    const auto span = [&](int dim, double from, double len, index_t& lo, index_t& n) {
      (void)from, (void)len;
      lo = dim < 0 ? 0 : b.offset[static_cast<std::size_t>(dim)] - outer.offset[static_cast<std::size_t>(dim)];
      n = dim < 0 ? 1 : outer.extent[static_cast<std::size_t>(dim)];
    };
    index_t r0, rn, c0, cn;
    span(row_, a.y, a.h, r0, rn);
    span(col_, a.x, a.w, c0, cn);
    const double rh = row_ < 0 ? 1 : static_cast<double>(b.extent[static_cast<std::size_t>(row_)]);
    const double cw = col_ < 0 ? 1 : static_cast<double>(b.extent[static_cast<std::size_t>(col_)]);
    const double fy = a.h / static_cast<double>(std::max<index_t>(rn, 1)), fx = a.w / static_cast<double>(std::max<index_t>(cn, 1));
    return {a.x + static_cast<double>(c0) * fx, a.y + static_cast<double>(r0) * fy, cw * fx, rh * fy};
  }

  // The whole tensor as a box (the `outer` of place() for a panel).
  box whole() const {
    box b;
    b.offset = index_list(shape_.size(), 0);
    b.extent = shape_;
    return b;
  }

  static constexpr double margin = 10;

 private:
  index_list shape_;
  svg_options o_;
  int row_ = -1, col_ = -1;
  index_t rows_ = 1, cols_ = 1;
  std::vector<std::size_t> other_;
  std::vector<std::vector<index_t>> cuts_;
  std::vector<std::vector<std::pair<index_t, index_t>>> panels_;
  double total_panels_ = 1;
  std::size_t per_row_ = 1;
  double cell_ = 600, pw_ = 600, ph_ = 600, title_h_ = 0, gap_ = 14;

  index_t extent(int dim) const { return dim < 0 ? 1 : shape_[static_cast<std::size_t>(dim)]; }
  index_t volume2(const box& b) const {
    return (row_ < 0 ? 1 : b.extent[static_cast<std::size_t>(row_)]) * (col_ < 0 ? 1 : b.extent[static_cast<std::size_t>(col_)]);
  }
};

// SVG elements, appended to a string.
class writer {
 public:
  void rect_el(const rect& r, std::string_view fill, std::string_view extra = {}) {
    body += "<rect x=\"" + num(r.x) + "\" y=\"" + num(r.y) + "\" width=\"" + num(r.w) + "\" height=\"" + num(r.h) +
            "\" fill=\"" + std::string(fill) + "\"";
    if (!extra.empty()) body += " " + std::string(extra);
    body += "/>\n";
  }
  // `attrs` (a stroke) for a rectangle large enough to show it; tiny boxes go without, or
  // thousands of outlines would paint the picture black.
  static std::string_view outline(const rect& r, std::string_view attrs) {
    return r.w >= 3 && r.h >= 3 ? attrs : std::string_view{};
  }
  void text(double x, double baseline, std::string_view s, double size = 12, std::string_view extra = {}) {
    body += "<text x=\"" + num(x) + "\" y=\"" + num(baseline) + "\" font-size=\"" + num(size) + "\"";
    if (!extra.empty()) body += " " + std::string(extra);
    body += ">" + escape(s) + "</text>\n";
    if (extra.find("middle") == std::string_view::npos)  // the canvas widens for long lines
      right = std::max(right, x + 0.62 * size * static_cast<double>(s.size()));
  }
  static double label_size(const rect& r, std::string_view s) {
    return std::min({13.0, r.h * 0.6, r.w / (0.62 * static_cast<double>(std::max<std::size_t>(s.size(), 1)))});
  }
  // A label centred in r: `s` when it fits, else `shorter` when that fits.
  void label(const rect& r, std::string_view s, std::string_view shorter = {}) {
    if (label_size(r, s) < 6 && !shorter.empty()) s = shorter;
    const double size = label_size(r, s);
    if (size < 6) return;
    const double tw = 0.62 * size * static_cast<double>(s.size()) + 4;
    rect_el({r.x + (r.w - tw) / 2, r.y + r.h / 2 - size * 0.6, tw, size * 1.2}, "#ffffff", "fill-opacity=\"0.75\"");
    text(r.x + r.w / 2, r.y + r.h / 2 + size * 0.35, s, size, "text-anchor=\"middle\"");
  }
  void legend_line(std::string_view s) {
    text(picture::margin, y, s, 12);
    y += 16;
  }
  // Colour swatches of the ranks drawn (the first palette_size of them).
  void swatches(const std::vector<index_t>& ranks, double width) {
    double x = picture::margin;
    std::size_t shown = 0;
    for (index_t r : ranks) {
      const std::string t = std::to_string(r);
      const double w = 16 + 7.5 * static_cast<double>(t.size()) + 10;
      if (x + w > width - picture::margin) x = picture::margin, y += 16;
      rect_el({x, y - 10, 12, 12}, colour_of(r), "stroke=\"#333\" stroke-width=\"0.5\"");
      text(x + 16, y, t, 12);
      x += w;
      if (++shown == palette_size) break;
    }
    y += 16;
    if (ranks.size() > palette_size)
      legend_line("... " + std::to_string(ranks.size()) + " ranks: colours repeat every " +
                  std::to_string(palette_size) + " ranks (colour of rank r = that of r mod " +
                  std::to_string(palette_size) + ")");
  }
  std::string finish(double canvas_width, std::string_view title) const {
    const double width = std::max(canvas_width, right + picture::margin);
    std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    num(width) + "\" height=\"" + num(y) + "\" viewBox=\"0 0 " + num(width) + " " + num(y) +
                    "\" font-family=\"sans-serif\">\n<title>" + escape(title) + "</title>\n" +
                    "<defs>\n"
                    "<pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\" "
                    "patternTransform=\"rotate(45)\"><rect x=\"0\" y=\"0\" width=\"2\" height=\"8\" "
                    "fill=\"#ffffff\" fill-opacity=\"0.7\"/></pattern>\n"
                    "<pattern id=\"cross\" patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\">"
                    "<path d=\"M0,0 L8,8 M8,0 L0,8\" stroke=\"" + problem_red + "\" stroke-width=\"2\"/></pattern>\n"
                    "</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
    return s + body + "</svg>\n";
  }

  std::string body;
  double y = 0;  // the next legend line's baseline, then the picture's height
  double right = 0;  // the right end of the longest line of text
};

// Panel frames and titles; returns the top of the legend.
inline double draw_frames(writer& w, const picture& pic, double top) {
  for (std::size_t p = 0; p < pic.panels(); ++p) {
    const rect a = pic.area(p, top);
    if (!pic.panel_title(p).empty()) w.text(a.x, a.y - 4, pic.panel_title(p), 11);
    w.rect_el(a, "#f4f4f4", "stroke=\"#000\" stroke-width=\"1\"");
  }
  return top + pic.panels_height() + 6;
}

inline std::string dims_line(const picture& pic) {
  std::string s = "rows: ";
  s += pic.row_dim() < 0 ? std::string("-") : "dim " + std::to_string(pic.row_dim());
  s += ", columns: ";
  s += pic.col_dim() < 0 ? std::string("-") : "dim " + std::to_string(pic.col_dim());
  return s + " (to scale along each)";
}

inline void capped_lines(writer& w, const picture& pic, std::size_t drawn, std::size_t total, const char* what) {
  if (pic.total_panels() > static_cast<double>(pic.panels()))
    w.legend_line("showing " + std::to_string(pic.panels()) + " of " + num(pic.total_panels()) +
                  " panels (slices of the other dims)");
  if (drawn < total)
    w.legend_line("showing " + std::to_string(drawn) + " of " + std::to_string(total) + " " + what +
                  " (svg_options::max_boxes)");
}

// The target boxes, each cut into the pieces its ranks receive (one band per target rank of a
// replicated box). `problems`: boxes of target ranks to draw in red on top (may be null).
inline std::string draw_plan(const layout& src, const layout& dst, std::span<const transfer> xs,
                             const plan_check* check, const svg_options& o, std::vector<std::string> legend) {
  const partition ps(src), pd(dst);
  const picture pic(dst.shape, o, {ps.bounds, pd.bounds});
  writer w;
  w.y = 22;
  w.text(picture::margin, 16, legend.front(), 13, "font-weight=\"bold\"");
  const double top = 30;
  double legend_top = draw_frames(w, pic, top);
  // transfers by receiver
  std::map<index_t, std::vector<std::size_t>> to;
  const auto in_tensor = [&](const box& b) {  // a bad transfer (check_plan lists it) is not drawn
    if (b.offset.size() != dst.shape.size() || b.extent.size() != dst.shape.size()) return false;
    for (std::size_t d = 0; d < dst.shape.size(); ++d)
      if (b.offset[d] < 0 || b.offset[d] > dst.shape[d] || b.extent[d] < 0 || b.extent[d] > dst.shape[d] - b.offset[d])
        return false;
    return true;
  };
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (pd.has_rank(xs[i].dst) && in_tensor(xs[i].where)) to[xs[i].dst].push_back(i);
  constexpr std::size_t max_bands = 8;
  std::size_t drawn = 0, total = 0;
  std::vector<index_t> senders, buf;
  std::vector<std::pair<rect, std::string>> labels, outlines;  // outlines: boxes, then bands
  const auto band_of = [&](const rect& a, std::size_t j, std::size_t n) {
    return rect{a.x, a.y + a.h * static_cast<double>(j) / static_cast<double>(n), a.w, a.h / static_cast<double>(n)};
  };
  struct band_at {
    rect r;
    box b;
  };
  std::map<index_t, std::vector<band_at>> bands;  // per target rank: where it is drawn
  for (std::size_t p = 0; p < pic.panels(); ++p) {
    const rect area = pic.area(p, top);
    for (index_t k = 0; k < pd.regions; ++k) {
      const box b = pd.region_box(k);
      if (!pic.meets(p, b)) continue;
      const auto owners = pd.owners_of(k, buf);
      const std::vector<index_t> own(owners.begin(), owners.end());
      const rect whole = pic.place(area, pic.whole(), b);
      const std::size_t n = std::min(own.size(), max_bands);
      for (std::size_t j = 0; j < n; ++j) {
        const rect band = band_of(whole, j, n);
        bands[own[j]].push_back({band, b});
        auto it = to.find(own[j]);
        if (it == to.end()) continue;
        for (std::size_t i : it->second) {
          const transfer& x = xs[i];
          const box piece = intersect(x.where, b);
          if (volume(piece) == 0 || !pic.meets(p, piece)) continue;
          ++total;
          if (drawn == o.max_boxes) continue;
          ++drawn;
          senders.push_back(x.src);
          const rect r = pic.place(band, b, piece);
          if (x.src == x.dst) {
            w.rect_el(r, colour_of(x.src), writer::outline(r, "stroke=\"#000\" stroke-width=\"1\" stroke-dasharray=\"4,3\""));
            w.rect_el(r, "url(#hatch)");
          } else {
            w.rect_el(r, colour_of(x.src), writer::outline(r, "stroke=\"#333\" stroke-width=\"0.75\""));
          }
          labels.push_back({r, "from " + std::to_string(x.src)});
        }
      }
      if (outlines.size() >= 2 * o.max_boxes) continue;  // outlines of the first boxes only
      outlines.push_back({whole, {}});
      for (std::size_t j = 0; j < n; ++j)
        outlines.push_back({band_of(whole, j, n), "to " + std::to_string(own[j]) +
                                                      (j + 1 == n && own.size() > n
                                                           ? " (+" + std::to_string(own.size() - n) + " more)"
                                                           : "")});
    }
  }
  // problems in red
  std::size_t red = 0;
  if (check)
    for (const plan_problem& q : check->problems) {
      auto it = bands.find(q.dst);
      if (it == bands.end() || !in_tensor(q.where)) continue;
      for (const band_at& ba : it->second) {
        const box hit = intersect(q.where, ba.b);
        if (volume(hit) == 0) continue;
        const rect r = pic.place(ba.r, ba.b, hit);
        if (q.kind == plan_problem_kind::uncovered) {
          w.rect_el(r, problem_red, "stroke=\"#800000\" stroke-width=\"1\"");
          ++red;
        } else if (q.kind == plan_problem_kind::covered_twice) {
          w.rect_el(r, "url(#cross)", "stroke=\"" + std::string(problem_red) + "\" stroke-width=\"3\"");
          ++red;
        }
      }
    }
  // senders' labels over the red, so that they stay readable
  for (const auto& [r, s] : labels) w.label(r, s, s.substr(s.find(' ') + 1));  // or only the rank
  // target boxes in bold, bands of replicated ones apart, each band named by its receiver
  for (const auto& [r, s] : outlines) {
    if (s.empty()) {
      w.rect_el(r, "none", writer::outline(r, "stroke=\"#000\" stroke-width=\"2\""));
      continue;
    }
    w.rect_el(r, "none", writer::outline(r, "stroke=\"#000\" stroke-width=\"0.75\""));
    if (r.h >= 14 && r.w >= 40) w.text(r.x + 3, r.y + 11, s, 9, "fill=\"#000\"");
  }
  w.y = legend_top + 14;
  for (std::size_t i = 1; i < legend.size(); ++i) w.legend_line(legend[i]);
  w.legend_line(dims_line(pic));
  w.legend_line("bold outline: a target box, cut into bands when replicated; \"to r\": the band's receiver");
  w.legend_line("piece colour = its sender; hatched with a dashed outline = a local copy (src == dst)");
  if (check) w.legend_line("red: a hole (no transfer brings it); red cross-hatched: received twice");
  capped_lines(w, pic, drawn, total, "pieces");
  std::sort(senders.begin(), senders.end());
  senders.erase(std::unique(senders.begin(), senders.end()), senders.end());
  w.legend_line("senders:");
  w.swatches(senders, pic.width());
  return w.finish(pic.width(), legend.front());
}

}  // namespace detail::svg

/// A picture of `l`: each rank's box coloured by rank (replicated boxes hatched, labelled with
/// all their owners). A well-formed SVG document.
inline std::string layout_svg(const layout& l, const svg_options& o = {}) {
  validate(l);
  using namespace detail::svg;
  const partition pt(l);
  const picture pic(l.shape, o, {pt.bounds});
  writer w;
  const std::string title = "layout " + to_string(l);
  w.text(picture::margin, 16, title, 13, "font-weight=\"bold\"");
  const double top = 30;
  const double legend_top = draw_frames(w, pic, top);
  std::size_t drawn = 0, total = 0;
  std::vector<index_t> buf, shown;
  std::vector<std::pair<rect, std::string>> labels;
  for (std::size_t p = 0; p < pic.panels(); ++p) {
    const rect area = pic.area(p, top);
    for (index_t k = 0; k < pt.regions; ++k) {
      const box b = pt.region_box(k);
      if (!pic.meets(p, b)) continue;
      ++total;
      if (drawn == o.max_boxes) continue;
      ++drawn;
      const auto owners = pt.owners_of(k, buf);
      const std::vector<index_t> own(owners.begin(), owners.end());
      const rect r = pic.place(area, pic.whole(), b);
      w.rect_el(r, colour_of(own.front()), writer::outline(r, "stroke=\"#000\" stroke-width=\"1\""));
      if (own.size() > 1) w.rect_el(r, "url(#hatch)");
      shown.push_back(own.front());
      labels.push_back({r, (own.size() > 1 ? "ranks " : "rank ") + ranks_text(own, 4)});
    }
  }
  for (const auto& [r, s] : labels) w.label(r, s, s.substr(s.find(' ') + 1));  // or only the ranks
  w.y = legend_top + 14;
  w.legend_line(std::to_string(num_ranks(l)) + " rank" + (num_ranks(l) == 1 ? "" : "s") + ", " +
                std::to_string(pt.regions) + " distinct box" + (pt.regions == 1 ? "" : "es") + ", " +
                std::to_string(pt.replicas) + " rank" + (pt.replicas == 1 ? "" : "s") + " per box");
  w.legend_line(dims_line(pic));
  w.legend_line("colour = the rank (the lowest owner of a box); hatched = replicated: every owner listed");
  capped_lines(w, pic, drawn, total, "boxes");
  std::sort(shown.begin(), shown.end());
  w.legend_line("ranks:");
  w.swatches(shown, pic.width());
  return w.finish(pic.width(), title);
}

/// A picture of plan `p`: the target boxes, each cut into the pieces it receives coloured by
/// sender, local copies hatched, the bytes in the legend.
inline std::string plan_svg(const transfer_plan& p, const svg_options& o = {}) {
  const plan_cost c = p.cost(o.element_bytes);
  using detail::svg::bytes_text;
  return detail::svg::draw_plan(
      p.src, p.dst, p.transfers, nullptr, o,
      {"plan " + to_string(p.src) + " -> " + to_string(p.dst),
       "cross-rank " + bytes_text(c.cross_bytes) + " in " + std::to_string(c.messages) + " message" +
           (c.messages == 1 ? "" : "s") + "; lower bound " + bytes_text(c.lower_bound_bytes) + "; local copies " +
           bytes_text(c.local_bytes) + " (" + std::to_string(o.element_bytes) + " byte" +
           (o.element_bytes == 1 ? "" : "s") + " per element)"});
}

/// A picture of `transfers` as a plan from `src` to `dst` with the verdict `r` of check_plan:
/// like plan_svg, with the holes and the doubly covered boxes that `r` lists drawn in red.
inline std::string check_plan_svg(const layout& src, const layout& dst, std::span<const transfer> transfers,
                                  const plan_check& r, const svg_options& o = {}) {
  validate(src, "check_plan_svg: source layout");
  validate(dst, "check_plan_svg: target layout");
  detail::expect_same_shape(src, dst, "check_plan_svg");
  using detail::svg::bytes_text;
  std::vector<std::string> legend{
      "check-plan " + to_string(src) + " -> " + to_string(dst),
      std::string(r.ok() ? "correct: every target element received once, every sender holds what it sends"
                         : std::string("WRONG:") + (r.complete ? "" : " incomplete") + (r.sound ? "" : " unsound") +
                               " (" + std::to_string(r.problem_count) + " problem" +
                               (r.problem_count == 1 ? "" : "s") + ")"),
      "cross-rank " + bytes_text(r.cost.cross_bytes) + " in " + std::to_string(r.cost.messages) + " messages; lower bound " +
          bytes_text(r.lower_bound_bytes) + "; minimal plan " + bytes_text(r.minimal.cross_bytes) + " in " +
          std::to_string(r.minimal.messages) + " messages"};
  if (r.problems.size() < r.problem_count)
    legend.push_back("problems drawn: the first " + std::to_string(r.problems.size()) + " of " +
                     std::to_string(r.problem_count));
  return detail::svg::draw_plan(src, dst, transfers, &r, o, std::move(legend));
}

}  // namespace reshard
