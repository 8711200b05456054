// Printing doubles for people and for YAML: the shortest decimal form that reads back as the same
// value ("0.0003", not "0.00029999999999999997"), without an exponent for whole numbers below
// 1e17 ("30", not "3e+01").
#ifndef RINGMASTER_COMMON_FORMAT_DOUBLE_H_
#define RINGMASTER_COMMON_FORMAT_DOUBLE_H_

#include <string>

namespace ringmaster {

// `v` must be finite; callers spell NaN and infinities their own way.
std::string FormatFiniteDouble(double v);

// Bytes per second in decimal units, as nccl-tests prints them: "1.53 GB/s", and below
// 0.1 GB/s "3.20 MB/s".
std::string FormatBandwidth(double bytes_per_second);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_FORMAT_DOUBLE_H_
