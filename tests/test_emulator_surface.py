"""The emulated pyACL's public surface is real pyACL's: code that runs on the emulator cannot
touch a name that fails on hardware, and the runtime names only real pyACL calls.

The real names are the method tables of the pyACL binding (each `{"name", Wrap..., ...}` entry
becomes a function of its module), from hicann/runtime at commit
134e2edb8c4618e202a2b7bbbcc5cc5587516371:
  acl       python/pyACL/py_init_acl.cpp (g_moduleMethods, and the sub-modules PyInit_acl adds)
  acl.rt    python/pyACL/rt/pyrt_methods.cpp (g_methodsRt, the USE_MDL entries included)
  acl.mdl   python/pyACL/mdl/pymdl_methods.cpp (g_methodsMdl, the USE_MDL entries included)
  acl.media python/pyACL/media/pymedia_methods.cpp (g_methodsMedia, the USE_MDL entries included)
  acl.util  python/pyACL/util/pyutil_methods.cpp (g_methodsUtil)
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from ge_python_backend.emulator import acl


def names(text: str) -> frozenset[str]:
    """The whitespace-separated names of `text`."""
    return frozenset(text.split())


REAL: dict[str, frozenset[str]] = {
    "acl": names(
        """
        init finalize get_version get_soc_name float16_to_float float_to_float16
        create_data_buffer destroy_data_buffer get_data_buffer_addr get_data_buffer_size
        get_data_buffer_size_v2 update_data_buffer data_type_size create_tensor_desc
        destroy_tensor_desc get_tensor_desc_type get_tensor_desc_format get_tensor_desc_size
        get_tensor_desc_element_count get_tensor_desc_num_dims get_tensor_desc_dim
        get_tensor_desc_name set_tensor_desc_name trans_tensor_desc_format app_log
        set_tensor_storage_format set_tensor_storage_shape set_tensor_format set_tensor_shape
        set_tensor_origin_format set_tensor_dynamic_input set_tensor_origin_shape
        set_tensor_shape_range get_tensor_desc_address get_tensor_desc_by_index
        get_tensor_desc_dim_range get_tensor_desc_dim_v2 set_tensor_place_ment get_recent_err_msg
        set_tensor_const set_tensor_value_range get_cann_attribute_list get_cann_attribute
        get_device_capability get_cann_version finalize_reference get_version_str
        rt mdl media op blas util prof himpi fv
        """
    ),
    "acl.rt": names(
        """
        binary_load_from_file binary_load_from_data get_function_addr get_function_name
        register_cpu_func create_binary destroy_binary binary_load binary_unload
        binary_get_function launch_kernel kernel_args_init kernel_args_init_by_user_mem
        kernel_args_get_mem_size kernel_args_get_handle_mem_size kernel_args_append
        kernel_args_append_place_holder kernel_args_get_place_holder_buffer
        kernel_args_para_update kernel_args_finalize launch_kernel_with_config set_device
        reset_device reset_device_force get_device set_device_sat_mode get_device_sat_mode
        get_run_mode set_ts_device get_device_count create_context destroy_context set_context
        get_context ctx_get_current_default_stream get_overflow_status reset_overflow_status
        malloc free get_mem_info malloc_cached mem_flush mem_invalidate malloc_host free_host
        memcpy memcpy_async memset memset_async create_stream create_stream_with_config
        destroy_stream destroy_stream_force set_stream_overflow_switch
        get_stream_overflow_switch set_stream_failure_mode stream_query create_event
        create_event_with_flag create_event_ex_with_flag destroy_event synchronize_stream
        synchronize_stream_with_timeout process_report subscribe_report unsubscribe_report
        launch_callback synchronize_device record_event reset_event query_event
        query_event_status query_event_wait_status synchronize_event
        synchronize_event_with_timeout event_elapsed_time event_get_timestamp get_event_id
        get_event_avail_num stream_wait_event stream_get_id get_stream_available_num
        set_stream_attribute get_stream_attribute get_thread_last_task_id reduce_async
        set_exception_info_callback get_error_code_from_exception_info
        get_task_id_from_exception_info get_stream_id_from_exception_info
        get_thread_id_from_exception_info get_device_id_from_exception_info set_op_wait_timeout
        set_op_execute_time_out memcpy2d memcpy2d_async reserve_mem_address release_mem_address
        malloc_physical free_physical malloc_with_cfg malloc_for_task_scheduler
        malloc_host_with_cfg map_mem unmap_mem mem_export_to_shareable_handle
        device_get_bare_tgid mem_set_pid_to_shareable_handle mem_import_from_shareable_handle
        mem_get_allocation_granularity get_device_utilization_rate query_device_status
        ctx_set_sys_param_opt ctx_get_sys_param_opt set_sys_param_opt get_sys_param_opt
        malloc_align32 allocator_create_desc allocator_destroy_desc allocator_set_obj_to_desc
        allocator_set_alloc_func_to_desc allocator_set_free_func_to_desc
        allocator_set_alloc_advise_func_to_desc allocator_set_get_addr_from_block_func_to_desc
        allocator_register allocator_unregister peek_at_last_error get_last_error
        synchronize_device_with_timeout cmo_async device_task_abort memcpy_async_with_condition
        stream_abort pointer_get_attributes host_register host_unregister get_memcpy_desc_size
        set_memcpy_desc memcpy_async_with_desc value_write value_wait device_can_access_peer
        device_enable_peer_access device_disable_peer_access ipc_mem_get_export_key
        ipc_mem_set_import_pid ipc_mem_import_by_key ipc_mem_close get_device_info
        device_get_stream_priority_range get_device_capability get_device_res_limit
        set_device_res_limit reset_device_res_limit get_devices_topo create_notify
        destroy_notify record_notify wait_and_reset_notify get_notify_id notify_batch_reset
        notify_get_export_key notify_set_import_pid notify_import_by_key get_stream_res_limit
        set_stream_res_limit reset_stream_res_limit use_stream_res_in_current_thread
        unuse_stream_res_in_current_thread get_res_in_current_thread get_primary_ctx_state
        get_logic_dev_id_by_user_dev_id get_user_dev_id_by_logic_dev_id
        get_logic_dev_id_by_phy_dev_id get_phy_dev_id_by_logic_dev_id set_op_execute_timeout_v2
        get_op_timeout_interval get_op_execute_timeout device_get_uuid device_peer_access_status
        host_register_v2 host_get_device_pointer
        set_group get_group_count create_group_info destroy_group_info get_all_group_info
        get_group_info_detail get_mem_uce_info mem_uce_repair
        """
    ),
    "acl.mdl": names(
        """
        load_from_file unload query_size execute execute_async create_dataset destroy_dataset
        get_dataset_buffer get_dataset_num_buffers add_dataset_buffer get_output_size_by_index
        get_num_inputs get_num_outputs get_input_size_by_index create_desc get_desc destroy_desc
        load_from_mem load_from_file_with_mem load_from_mem_with_mem query_size_from_mem
        set_dynamic_batch_size set_dynamic_hw_size get_cur_output_dims get_first_aipp_info
        create_aipp destroy_aipp get_input_dims get_input_dims_v2 get_output_dims
        get_input_name_by_index get_output_name_by_index get_input_format get_output_format
        get_input_data_type get_output_data_type get_input_index_by_name
        get_output_index_by_name get_dynamic_batch get_dynamic_hw set_aipp_input_format
        set_aipp_csc_params set_aipp_rbuv_swap_switch set_aipp_ax_swap_switch
        set_aipp_src_image_size set_aipp_crop_params set_aipp_padding_params
        set_aipp_dtc_pixel_mean set_aipp_dtc_pixel_min set_aipp_pixel_var_reci set_input_aipp
        set_input_dynamic_dims get_input_dynamic_gear_count get_input_dynamic_dims
        create_and_get_op_desc init_dump finalize_dump get_aipp_type set_aipp_by_input_index
        set_dump dump_reg_callback dump_unreg_callback load_with_config create_config_handle
        destroy_config_handle set_config_opt get_tensor_real_name set_dataset_tensor_desc
        get_dataset_tensor_desc get_op_attr get_aipp_data_size create_exec_config_handle
        destroy_exec_config_handle set_exec_config_opt execute_v2 get_desc_from_file
        get_desc_from_mem get_input_dims_range bundle_load_from_file bundle_load_from_mem
        bundle_unload bundle_get_model_id bundle_get_model_num
        set_aipp_scf_params load_from_file_with_q load_from_mem_with_q
        """
    ),
    "acl.media": names(
        """
        dvpp_malloc dvpp_malloc_with_cfg dvpp_free dvpp_create_channel dvpp_destroy_channel
        dvpp_create_channel_desc dvpp_destroy_channel_desc dvpp_set_channel_desc_param
        dvpp_get_channel_desc_param dvpp_get_channel_desc_channel_id dvpp_create_pic_desc
        dvpp_destroy_pic_desc dvpp_set_pic_desc_data dvpp_set_pic_desc_size
        dvpp_set_pic_desc_format dvpp_set_pic_desc_width dvpp_set_pic_desc_height
        dvpp_set_pic_desc_width_stride dvpp_set_pic_desc_height_stride
        dvpp_set_pic_desc_ret_code dvpp_get_pic_desc_data dvpp_get_pic_desc_size
        dvpp_get_pic_desc_format dvpp_get_pic_desc_width dvpp_get_pic_desc_height
        dvpp_get_pic_desc_width_stride dvpp_get_pic_desc_height_stride
        dvpp_get_pic_desc_ret_code dvpp_create_stream_desc dvpp_destroy_stream_desc
        dvpp_set_stream_desc_data dvpp_set_stream_desc_size dvpp_set_stream_desc_format
        dvpp_set_stream_desc_timestamp dvpp_set_stream_desc_ret_code dvpp_set_stream_desc_eos
        dvpp_get_stream_desc_data dvpp_get_stream_desc_size dvpp_get_stream_desc_format
        dvpp_get_stream_desc_timestamp dvpp_get_stream_desc_ret_code dvpp_get_stream_desc_eos
        dvpp_create_batch_pic_desc dvpp_destroy_batch_pic_desc dvpp_get_pic_desc
        dvpp_vpc_resize_async dvpp_vpc_crop_async dvpp_vpc_batch_crop_async
        dvpp_vpc_crop_and_paste_async dvpp_vpc_batch_crop_and_paste_async
        dvpp_vpc_crop_resize_async dvpp_vpc_batch_crop_resize_async
        dvpp_vpc_crop_resize_paste_async dvpp_vpc_batch_crop_resize_paste_async
        dvpp_vpc_batch_crop_resize_make_border_async dvpp_create_roi_config
        dvpp_destroy_roi_config dvpp_set_roi_config dvpp_set_roi_config_left
        dvpp_set_roi_config_right dvpp_set_roi_config_top dvpp_set_roi_config_bottom
        dvpp_create_resize_config dvpp_destroy_resize_config
        dvpp_set_resize_config_interpolation dvpp_get_resize_config_interpolation
        dvpp_jpeg_decode_async dvpp_jpeg_get_image_info dvpp_jpeg_get_image_info_v2
        dvpp_jpeg_predict_dec_size dvpp_jpeg_encode_async dvpp_jpeg_predict_enc_size
        dvpp_create_jpege_config dvpp_destroy_jpege_config dvpp_set_jpege_config_level
        dvpp_get_jpege_config_level vdec_create_channel vdec_destroy_channel
        vdec_create_channel_desc vdec_destroy_channel_desc vdec_set_channel_desc_channel_id
        vdec_set_channel_desc_thread_id vdec_set_channel_desc_callback
        vdec_set_channel_desc_entype vdec_set_channel_desc_out_pic_format
        vdec_set_channel_desc_out_pic_width vdec_set_channel_desc_out_pic_height
        vdec_set_channel_desc_ref_frame_num vdec_get_channel_desc_channel_id
        vdec_get_channel_desc_thread_id vdec_get_channel_desc_callback
        vdec_get_channel_desc_entype vdec_get_channel_desc_out_pic_format
        vdec_get_channel_desc_out_pic_width vdec_get_channel_desc_out_pic_height
        vdec_get_channel_desc_ref_frame_num vdec_send_frame vdec_send_skipped_frame
        vdec_create_frame_config vdec_destroy_frame_config vdec_get_channel_desc_out_mode
        vdec_set_channel_desc_out_mode vdec_get_channel_desc_bit_depth
        vdec_set_channel_desc_bit_depth vdec_set_channel_desc_param vdec_get_channel_desc_param
        venc_create_channel venc_destroy_channel venc_send_frame venc_create_channel_desc
        venc_destroy_channel_desc venc_set_channel_desc_thread_id venc_set_channel_desc_callback
        venc_set_channel_desc_entype venc_set_channel_desc_pic_format
        venc_set_channel_desc_pic_width venc_set_channel_desc_pic_height
        venc_set_channel_desc_key_frame_interval venc_get_channel_desc_channel_id
        venc_get_channel_desc_thread_id venc_get_channel_desc_callback
        venc_get_channel_desc_entype venc_get_channel_desc_pic_format
        venc_get_channel_desc_pic_width venc_get_channel_desc_pic_height
        venc_get_channel_desc_key_frame_interval venc_create_frame_config
        venc_destroy_frame_config venc_set_frame_config_force_i_frame venc_set_frame_config_eos
        venc_get_frame_config_force_i_frame venc_get_frame_config_eos
        venc_get_channel_desc_buf_addr venc_set_channel_desc_buf_addr
        venc_get_channel_desc_buf_size venc_set_channel_desc_buf_size
        venc_get_channel_desc_max_bit_rate venc_set_channel_desc_max_bit_rate
        venc_get_channel_desc_rc_mode venc_set_channel_desc_rc_mode
        venc_get_channel_desc_src_rate venc_set_channel_desc_src_rate
        venc_get_channel_desc_param venc_set_channel_desc_param dvpp_create_border_config
        dvpp_destroy_border_config dvpp_set_border_config_value
        dvpp_set_border_config_border_type dvpp_set_border_config_top
        dvpp_set_border_config_bottom dvpp_set_border_config_left dvpp_set_border_config_right
        dvpp_get_border_config_value dvpp_get_border_config_border_type
        dvpp_get_border_config_top dvpp_get_border_config_bottom dvpp_get_border_config_left
        dvpp_get_border_config_right dvpp_vpc_convert_color_async dvpp_vpc_pyr_down_async
        dvpp_set_channel_desc_mode dvpp_png_decode_async dvpp_png_get_image_info
        dvpp_png_predict_dec_size dvpp_create_hist dvpp_destroy_hist dvpp_get_hist_dims
        dvpp_get_hist_data dvpp_get_hist_ret_code dvpp_clear_hist dvpp_create_lut_map
        dvpp_destroy_lut_map dvpp_get_lut_map_dims dvpp_get_lut_map_data
        dvpp_vpc_equalize_hist_async dvpp_vpc_make_border_async dvpp_vpc_calc_hist_async
        """
    ),
    "acl.util": names(
        """
        numpy_to_ptr numpy_contiguous_to_ptr ptr_to_numpy bytes_to_ptr ptr_to_bytes
        start_thread stop_thread
        """
    ),
}

# What the emulator implements: every public name of its modules, and nothing else.
EMULATED: dict[str, frozenset[str]] = {
    "acl": names(
        """
        app_log create_data_buffer create_tensor_desc data_type_size destroy_data_buffer
        destroy_tensor_desc finalize get_data_buffer_addr get_data_buffer_size
        get_data_buffer_size_v2 get_recent_err_msg get_soc_name get_tensor_desc_dim
        get_tensor_desc_dim_v2 get_tensor_desc_element_count get_tensor_desc_format
        get_tensor_desc_num_dims get_tensor_desc_size get_tensor_desc_type get_version init
        update_data_buffer mdl media rt util
        """
    ),
    "acl.rt": names(
        """
        create_context create_event create_stream destroy_context destroy_event destroy_stream
        event_elapsed_time free free_host get_context get_device get_device_count get_mem_info
        get_run_mode malloc malloc_host memcpy memcpy_async memset memset_async record_event
        reset_device
        set_context set_device stream_wait_event synchronize_device synchronize_event
        synchronize_event_with_timeout synchronize_stream synchronize_stream_with_timeout
        """
    ),
    "acl.mdl": names(
        """
        add_dataset_buffer create_dataset create_desc destroy_dataset destroy_desc execute
        execute_async get_cur_output_dims get_dataset_buffer get_dataset_num_buffers
        get_dataset_tensor_desc get_desc get_desc_from_file get_dynamic_batch get_dynamic_hw
        get_input_data_type get_input_dims get_input_dims_range get_input_dims_v2
        get_input_dynamic_dims
        get_input_dynamic_gear_count get_input_format get_input_index_by_name
        get_input_name_by_index get_input_size_by_index get_num_inputs get_num_outputs
        get_output_data_type get_output_dims get_output_format get_output_index_by_name
        get_output_name_by_index get_output_size_by_index get_tensor_real_name load_from_file
        load_from_file_with_mem load_from_mem query_size set_dataset_tensor_desc
        set_dynamic_batch_size set_dynamic_hw_size set_input_dynamic_dims unload
        create_aipp destroy_aipp get_aipp_data_size get_aipp_type get_first_aipp_info
        set_aipp_ax_swap_switch set_aipp_crop_params set_aipp_csc_params set_aipp_dtc_pixel_mean
        set_aipp_dtc_pixel_min set_aipp_input_format set_aipp_padding_params
        set_aipp_pixel_var_reci set_aipp_rbuv_swap_switch set_aipp_src_image_size set_input_aipp
        """
    ),
    "acl.media": names(
        """
        dvpp_create_channel dvpp_create_channel_desc dvpp_create_pic_desc
        dvpp_create_resize_config dvpp_create_roi_config dvpp_destroy_channel
        dvpp_destroy_channel_desc dvpp_destroy_pic_desc dvpp_destroy_resize_config
        dvpp_destroy_roi_config dvpp_free dvpp_get_pic_desc_data dvpp_get_pic_desc_format
        dvpp_get_pic_desc_height dvpp_get_pic_desc_height_stride dvpp_get_pic_desc_ret_code
        dvpp_get_pic_desc_size dvpp_get_pic_desc_width dvpp_get_pic_desc_width_stride
        dvpp_get_resize_config_interpolation dvpp_jpeg_decode_async dvpp_jpeg_get_image_info
        dvpp_jpeg_predict_dec_size dvpp_malloc dvpp_set_pic_desc_data dvpp_set_pic_desc_format
        dvpp_set_pic_desc_height dvpp_set_pic_desc_height_stride dvpp_set_pic_desc_size
        dvpp_set_pic_desc_width dvpp_set_pic_desc_width_stride
        dvpp_set_resize_config_interpolation dvpp_set_roi_config dvpp_vpc_crop_and_paste_async
        dvpp_vpc_resize_async
        """
    ),
    "acl.util": names("bytes_to_ptr numpy_to_ptr ptr_to_bytes ptr_to_numpy"),
}

MODULES: dict[str, ModuleType] = {
    "acl": acl,
    "acl.rt": acl.rt,
    "acl.mdl": acl.mdl,
    "acl.media": acl.media,
    "acl.util": acl.util,
}
RUNTIME = Path(__file__).resolve().parents[1] / "ge_python_backend" / "runtime"


def public(module: ModuleType) -> frozenset[str]:
    return frozenset(name for name in dir(module) if not name.startswith("_"))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_emulated_module_has_exactly_the_pinned_names_and_all_are_real(name: str) -> None:
    names = public(MODULES[name])
    assert names - REAL[name] == set(), f"{name} exposes names real pyACL does not have"
    assert names == EMULATED[name]


def test_the_pinned_names_are_real_pyacl_names() -> None:
    for name, emulated in EMULATED.items():
        assert emulated <= REAL[name], name


def test_the_runtime_names_only_real_pyacl_calls() -> None:
    # Every `acl.<call>` and `acl.<rt|mdl|media|util>.<call>` in the runtime's
    # source (calls, getattr names, messages), so a misspelt or emulator-only call fails here.
    named = re.compile(r"\bacl\.(?:(rt|mdl|media|util)\.)?([a-z_][a-z0-9_]*)")
    dynamic = re.compile(r"getattr\(acl\.(rt|mdl|media|util), \"([a-z_0-9]+)\"")
    found: set[tuple[str, str]] = set()
    for path in sorted(RUNTIME.glob("*.py")):
        text = path.read_text()
        for sub, call in named.findall(text) + dynamic.findall(text):
            module = f"acl.{sub}" if sub else "acl"
            if module == "acl" and call in ("rt", "mdl", "media", "util"):
                continue
            found.add((module, call))
    unknown = sorted(f"{module}.{call}" for module, call in found if call not in REAL[module])
    assert not unknown, unknown
    assert ("acl.mdl", "execute_async") in found and ("acl.rt", "stream_wait_event") in found
