#!/usr/bin/env python3
"""Reads a `hotstore record export --format hdf5` file with h5py and checks every frame.

usage: check_hdf5_export.py FILE.hdf5 RAW_DIR VERIFY.json

RAW_DIR is the same recording exported with `--format raw` (link-NNNN.bin per link) and
VERIFY.json the output of `hotstore record verify --json` for the store. The script checks the
file's layout and attributes (docs/record-hdf5.md), that each link's frames, concatenated over
the slice groups in order, are byte for byte the raw export's, and frame by frame that the
frame's link, sequence number and timestamp agree with the dataset, the timestamp table, the
slice's time range and verify's view (frame count, first and last sequence number, no gap).
Prints one line and exits 0 if all holds; fails with an AssertionError otherwise.
"""

import json
import os
import re
import struct
import sys

import h5py
import numpy as np

FRAME_MAGIC = 0x46525348


def main():
    path, raw_dir, verify_path = sys.argv[1:4]
    with open(verify_path) as f:
        verify = json.load(f)
    assert len(verify) == 1, f"verify lists {len(verify)} recordings, expected 1"
    v = verify[0]
    man = v["manifest"]
    rec = v["recording_id"]

    with h5py.File(path, "r") as f:
        a = f.attrs
        assert a["record_type"] == "TriggerRecord", a["record_type"]
        assert a["application_name"] == "hotstore"
        assert int(a["filelayout_version"]) == 1
        params = json.loads(a["filelayout_params"])
        assert params["raw_data_group_name"] == "RawData"
        assert int(a["recording_id"]) == rec and int(a["run_number"]) == rec
        assert int(a["frame_size"]) == man["frame_len"]
        assert bool(a["lossy"]) == man["lossy"]
        assert a["state"] == man["state"], (a["state"], man["state"])
        assert int(a["trigger_timestamp_ns"]) == man["triggers_ns"][0]
        assert list(a["trigger_timestamps_ns"]) == man["triggers_ns"]
        assert int(a["window_begin_ns"]) == man["start_ns"]
        assert int(a["window_end_ns"]) == man["end_ns"]
        assert int(a["pre_trigger_ns"]) == man["pre_ns"]
        assert int(a["post_trigger_ns"]) == man["post_ns"]
        assert int(a["slice_ns"]) == man["slice_ns"]
        link_ids = [int(x) for x in a["link_ids"]]
        assert link_ids == sorted(l["link"] for l in man["links"]), link_ids
        assert [int(x) for x in a["link_frames_recorded"]] == [
            next(l["frames_recorded"] for l in man["links"] if l["link"] == i) for i in link_ids
        ]
        assert [int(x) for x in a["link_frames_dropped"]] == [0] * len(link_ids)
        slice_ns = int(a["slice_ns"])
        start = int(a["window_begin_ns"])
        frame_len = int(a["frame_size"])

        names = list(f.keys())
        assert names == sorted(names), "groups are not in name order"
        assert int(a["slice_count"]) == len(names)
        pat = re.compile(r"^TriggerRecord(\d{%d})\.(\d{%d})$"
                         % (params["digits_for_record_number"], params["digits_for_sequence_number"]))
        frames_of = {i: [] for i in link_ids}
        ts_of = {i: [] for i in link_ids}
        last_seq = -1
        for name in names:
            m = pat.match(name)
            assert m, f"group {name!r} does not follow the layout"
            g = f[name]
            seq = int(g.attrs["sequence_number"])
            assert int(m.group(1)) == rec and int(m.group(2)) == seq
            assert seq > last_seq, "slices out of order"
            last_seq = seq
            begin, end = int(g.attrs["window_begin_ns"]), int(g.attrs["window_end_ns"])
            assert begin == start + seq * slice_ns and begin < end <= begin + slice_ns
            glinks = [int(x) for x in g.attrs["link_ids"]]
            assert sorted(g["RawData"].keys()) == [f"Link{i:04d}" for i in glinks]
            assert sorted(g["Timestamps"].keys()) == [f"Link{i:04d}" for i in glinks]
            total = 0
            for i in glinks:
                ds = g["RawData"][f"Link{i:04d}"]
                ts = g["Timestamps"][f"Link{i:04d}"][()]
                assert ds.dtype == np.uint8 and ds.ndim == 2 and ds.shape[1] == frame_len
                n = ds.shape[0]
                assert ts.dtype == np.uint64 and ts.shape == (n,)
                assert int(ds.attrs["link_id"]) == i and int(ds.attrs["frames"]) == n
                if n:
                    assert int(ds.attrs["first_timestamp_ns"]) == int(ts[0])
                    assert int(ds.attrs["last_timestamp_ns"]) == int(ts[-1])
                    assert begin <= int(ts.min()) and int(ts.max()) < end, "frame outside its slice"
                frames_of[i].append(ds[()])
                ts_of[i].append(ts)
                total += n
            assert int(g.attrs["frames"]) == total

        exported = [int(x) for x in a["link_frames_exported"]]
        vlinks = {l["link"]: l for l in v["links"]}
        frames_total = 0
        for k, i in enumerate(link_ids):
            frames = np.concatenate(frames_of[i]) if frames_of[i] else np.zeros((0, frame_len), np.uint8)
            ts = np.concatenate(ts_of[i]) if ts_of[i] else np.zeros(0, np.uint64)
            with open(os.path.join(raw_dir, f"link-{i:04d}.bin"), "rb") as r:
                raw = r.read()
            assert frames.tobytes() == raw, f"link {i}: HDF5 frames differ from the raw export"
            vl = vlinks[i]
            assert frames.shape[0] == vl["frames"] == exported[k], (frames.shape, vl["frames"], exported[k])
            seqs = []
            for j in range(frames.shape[0]):
                magic, link, _ver, seq, fts, flen = struct.unpack_from("<IHHQQI", frames[j])
                assert magic == FRAME_MAGIC and link == i and flen == frame_len, (i, j)
                assert fts == int(ts[j]), f"link {i} frame {j}: timestamp differs from the table"
                seqs.append(seq)
            if seqs:
                assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"link {i}: gap"
                assert seqs[0] == vl["first_seq"] and seqs[-1] == vl["last_seq"]
            frames_total += len(seqs)
        assert int(a["frames_exported"]) == frames_total
        assert int(a["recorded_size"]) == frames_total * frame_len
    print(f"ok: {frames_total} frames on {len(link_ids)} links in {len(names)} slices match")


if __name__ == "__main__":
    main()
