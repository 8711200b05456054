#include "coordinator/testing/node_registration.h"

namespace ringmaster::coordinator {

v1::Register NodeRegistration(const std::string& name, int devices, int domains) {
  v1::Register r;
  r.set_node(name);
  r.set_host_address(name + ".local");
  for (int i = 0; i < devices; ++i) {
    v1::Device* d = r.add_devices();
    d->set_index(i);
    d->set_kind("cpu");
    d->set_interconnect_domain(i * domains / devices);
  }
  return r;
}

}  // namespace ringmaster::coordinator
