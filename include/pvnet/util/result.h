// Result<T, E>: the value of a fallible setup call, or the error that stopped
// it. std::expected is C++23; this is the small part of it pvnet needs.
#pragma once

#include <type_traits>
#include <utility>
#include <variant>

namespace pvnet {

template <typename E>
struct Unexpected {
    E error;
};

template <typename E>
Unexpected<E> unexpected(E e) {
    return Unexpected<E>{e};
}

template <typename T, typename E>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
    Result(Unexpected<E> u) : v_(std::in_place_index<1>, u.error) {}    // NOLINT

    bool has_value() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return has_value(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &std::get<0>(v_); }
    const T* operator->() const { return &std::get<0>(v_); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    E error() const { return std::get<1>(v_); }

private:
    std::variant<T, E> v_;
};

/// Result of a call with nothing to return but success.
template <typename E>
class [[nodiscard]] Status {
public:
    Status() = default;
    Status(Unexpected<E> u) : ok_(false), e_(u.error) {}  // NOLINT
    bool has_value() const noexcept { return ok_; }
    explicit operator bool() const noexcept { return ok_; }
    E error() const { return e_; }

private:
    bool ok_ = true;
    E e_{};
};

}  // namespace pvnet
