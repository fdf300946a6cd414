CREATE TABLE IF NOT EXISTS test_backend_ops (
  test_time TEXT,
  build_commit TEXT,
  backend_name TEXT,
  op_name TEXT,
  op_params TEXT,
  test_mode TEXT,
  supported INTEGER,
  passed INTEGER,
  error_message TEXT,
  time_us REAL,
  flops REAL,
  bandwidth_gb_s REAL,
  memory_kb INTEGER,
  n_runs INTEGER,
  device_description TEXT,
  backend_reg_name TEXT
);

INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=f32,ne=[10,10,10,10],scale=2.000000,bias=0.000000,inplace=0', 'support', '1', '1', 'yes', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=f32,ne=[10,10,10,10],scale=2.000000,bias=1.000000,inplace=0', 'support', '1', '1', 'yes', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=f32,ne=[10,10,10,10],scale=2.000000,bias=1.000000,inplace=1', 'support', '1', '1', 'yes', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=f32,ne=[100,10,10,10],scale=2.000000,bias=1.000000,inplace=0', 'support', '1', '1', 'yes', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=bf16,ne=[10,10,10,10],scale=2.000000,bias=1.000000,inplace=0', 'support', '0', '0', 'no', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=bf16,ne=[10,10,10,10],scale=2.000000,bias=1.000000,inplace=1', 'support', '0', '0', 'no', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-12-05T16:59:11Z', '0c1e570-dirty', 'Vulkan0', 'SCALE', 'type=bf16,ne=[100,10,10,10],scale=0.500000,bias=0.000000,inplace=0', 'support', '0', '0', 'no', '0.000000', '0.000000', '0.000000', '0', '0', 'llvmpipe (LLVM 15.0.6, 256 bits)', 'Vulkan');
